"use strict";
// fastgguf's chat page: a client of the server's OpenAI routes like any other (GET /v1/models, POST
// /v1/chat/completions with stream: true), with the API key as a Bearer token when one is entered. Conversations
// and settings are kept in this browser's localStorage; replies are rendered by markdown.js (DOM nodes, no HTML).

const $ = (id) => document.getElementById(id);
const STORE = { conversations: "fastgguf.conversations", current: "fastgguf.current", settings: "fastgguf.settings" };
const SETTINGS = ["api-key", "system", "temperature", "top_p", "max_tokens", "extra", "model"];

const state = { conversations: load(STORE.conversations, []), current: load(STORE.current, null), controller: null };

function load(key, fallback) {
  try {
    const v = JSON.parse(localStorage.getItem(key));
    return v ?? fallback;
  } catch (e) {
    return fallback;
  }
}

function save() {
  localStorage.setItem(STORE.conversations, JSON.stringify(state.conversations));
  localStorage.setItem(STORE.current, JSON.stringify(state.current));
}

function setStatus(text) {
  $("status").textContent = text;
}

// -- settings ------------------------------------------------------------------------------------------------------

function restoreSettings() {
  const saved = load(STORE.settings, {});
  for (const id of SETTINGS) if (saved[id] !== undefined && id !== "model") $(id).value = saved[id];
  return saved;
}

function saveSettings() {
  const s = {};
  for (const id of SETTINGS) s[id] = $(id).value;
  localStorage.setItem(STORE.settings, JSON.stringify(s));
}

function headers() {
  const h = { "Content-Type": "application/json" };
  const key = $("api-key").value.trim();
  if (key) h.Authorization = "Bearer " + key;
  return h;
}

// the request's sampling fields: those given, then the extra JSON fields (any the API takes: seed, grammar, ...)
function requestBody(messages) {
  const body = { model: $("model").value, messages, stream: true, stream_options: { include_usage: true } };
  const fields = [["temperature", parseFloat], ["top_p", parseFloat], ["max_tokens", (v) => parseInt(v, 10)]];
  for (const [id, parse] of fields) {
    const v = parse($(id).value);
    if (!Number.isNaN(v)) body[id] = v;
  }
  const extra = $("extra").value.trim();
  return extra ? Object.assign(body, JSON.parse(extra)) : body;
}

async function errorText(resp) {
  const text = await resp.text();
  try {
    const e = JSON.parse(text).error;
    return `${resp.status}: ${typeof e === "string" ? e : e.message}`;
  } catch (err) {
    return `${resp.status}: ${text}`;
  }
}

async function loadModels(wanted) {
  const resp = await fetch("/v1/models", { headers: headers() });
  if (!resp.ok) {
    setStatus(resp.status === 401 ? "This server needs an API key (Settings)." : await errorText(resp));
    return;
  }
  const select = $("model");
  select.replaceChildren();
  for (const m of (await resp.json()).data) {
    const st = m.status && m.status.value;  // a server of several models: loaded, loading or unloaded (loads when used)
    select.append(new Option(st && st !== "loaded" ? `${m.id} (${st})` : m.id, m.id));
  }
  if (wanted && [...select.options].some((o) => o.value === wanted)) select.value = wanted;
  setStatus(select.options.length ? "" : "No model is served.");
}

// -- conversations -------------------------------------------------------------------------------------------------

function current() {
  return state.conversations.find((c) => c.id === state.current);
}

function newConversation() {
  const c = { id: Date.now().toString(36) + Math.random().toString(36).slice(2, 6), title: "New chat", messages: [] };
  state.conversations.unshift(c);
  state.current = c.id;
  save();
  render();
  return c;
}

function deleteConversation(id) {
  state.conversations = state.conversations.filter((c) => c.id !== id);
  if (state.current === id) state.current = state.conversations.length ? state.conversations[0].id : null;
  save();
  render();
}

function renderList() {
  const items = state.conversations.map((c) => {
    const li = document.createElement("li");
    li.className = c.id === state.current ? "active" : "";
    const open = li.appendChild(document.createElement("button"));
    open.className = "open";
    open.textContent = c.title;
    open.onclick = () => { state.current = c.id; save(); render(); };
    const del = li.appendChild(document.createElement("button"));
    del.className = "delete";
    del.textContent = "\u00d7";
    del.title = "Delete this conversation";
    del.onclick = () => deleteConversation(c.id);
    return li;
  });
  $("conversations").replaceChildren(...items);
}

function messageNode(msg) {
  const div = document.createElement("div");
  div.className = "message " + msg.role;
  div.append(document.createElement("div"), document.createElement("div"));
  div.firstChild.className = "content";
  div.lastChild.className = "meta";
  fillMessage(div, msg);
  return div;
}

function fillMessage(div, msg) {
  const content = div.firstChild;
  if (msg.role === "assistant") content.replaceChildren(markdown.render(msg.content));
  else content.textContent = msg.content;
  div.lastChild.textContent = msg.meta || "";
  div.classList.toggle("error", !!msg.error);
}

function render() {
  renderList();
  const c = current();
  $("messages").replaceChildren(...(c ? c.messages.map(messageNode) : []));
  $("messages").scrollTop = $("messages").scrollHeight;
}

// -- streaming -----------------------------------------------------------------------------------------------------

// the chunks of an SSE response as objects, until data: [DONE]
async function* events(resp) {
  const reader = resp.body.getReader();
  const decoder = new TextDecoder();
  let buf = "";
  for (;;) {
    const { done, value } = await reader.read();
    if (done) return;
    buf += decoder.decode(value, { stream: true });
    let end;
    while ((end = buf.indexOf("\n\n")) >= 0) {
      const data = buf.slice(0, end).split("\n").filter((l) => l.startsWith("data:")).map((l) => l.slice(5).trim());
      buf = buf.slice(end + 2);
      if (!data.length) continue;  // a ": ping" comment
      if (data.join("") === "[DONE]") return;
      yield JSON.parse(data.join("\n"));
    }
  }
}

function speed(t) {
  const n = t.usage ? t.usage.completion_tokens : t.chunks;
  const secs = (t.last - t.first) / 1000;
  const rate = n > 1 && secs > 0 ? `, ${((n - 1) / secs).toFixed(1)} tokens/s` : "";
  return `${n} tokens${rate}`;
}

async function stream(msg, div, body, signal) {
  const init = { method: "POST", headers: headers(), body: JSON.stringify(body), signal };
  const resp = await fetch("/v1/chat/completions", init);
  if (!resp.ok) throw new Error(await errorText(resp));
  const t = { chunks: 0, usage: null, first: 0, last: 0 };
  for await (const chunk of events(resp)) {
    if (chunk.error) throw new Error(chunk.error.message || JSON.stringify(chunk.error));
    if (chunk.usage) t.usage = chunk.usage;
    const delta = chunk.choices && chunk.choices[0] ? chunk.choices[0].delta : null;
    if (delta && delta.content) {
      t.last = performance.now();
      if (!t.chunks++) t.first = t.last;
      msg.content += delta.content;
      msg.meta = speed(t);
      fillMessage(div, msg);
      $("messages").scrollTop = $("messages").scrollHeight;
    }
  }
  msg.meta = speed(t);
}

function setBusy(busy) {
  $("send").hidden = busy;
  $("stop").hidden = !busy;
  document.body.classList.toggle("busy", busy);
}

async function send(text) {
  const c = current() || newConversation();
  const system = $("system").value.trim();
  const history = (system ? [{ role: "system", content: system }] : []).concat(
    c.messages.filter((m) => !m.error && m.content).map((m) => ({ role: m.role, content: m.content })));
  c.messages.push({ role: "user", content: text });
  if (c.title === "New chat") c.title = text.slice(0, 40);
  const msg = { role: "assistant", content: "", meta: "" };
  c.messages.push(msg);
  render();
  const div = $("messages").lastChild;
  state.controller = new AbortController();
  setBusy(true);
  try {
    await stream(msg, div, requestBody(history.concat([{ role: "user", content: text }])), state.controller.signal);
  } catch (e) {
    if (e.name === "AbortError") msg.meta = (msg.meta ? msg.meta + ", " : "") + "stopped";
    else Object.assign(msg, { error: true, meta: e.message });
  } finally {
    state.controller = null;
    setBusy(false);
    fillMessage(div, msg);
    div.classList.add("done");
    save();
    renderList();
  }
}

// -- wiring --------------------------------------------------------------------------------------------------------

function submit(ev) {
  ev.preventDefault();
  const text = $("prompt").value.trim();
  if (!text || state.controller) return;
  $("prompt").value = "";
  send(text);
}

function init() {
  const saved = restoreSettings();
  $("composer").addEventListener("submit", submit);
  $("prompt").addEventListener("keydown", (ev) => {
    if (ev.key === "Enter" && !ev.shiftKey && !ev.isComposing) submit(ev);
  });
  $("stop").addEventListener("click", () => state.controller && state.controller.abort());
  $("new-chat").addEventListener("click", newConversation);
  $("settings").addEventListener("change", saveSettings);
  $("api-key").addEventListener("change", () => loadModels($("model").value));
  if (!current()) state.current = state.conversations.length ? state.conversations[0].id : null;
  render();
  loadModels(saved.model).catch((e) => setStatus(e.message));
}

init();
