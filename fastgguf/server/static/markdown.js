"use strict";
// Markdown to DOM nodes, never to HTML: every piece of the text becomes a Text node (append(string) or
// textContent), so a reply holding <script> or <img onerror=...> shows those characters and runs nothing.
// Blocks: ``` fenced code, # headings, - / * / 1. lists, paragraphs; inline: `code`, **bold**, *italic*, _italic_.
window.markdown = (function () {
  const FENCE = /^\s*(```|~~~)\s*([\w+#.-]*)/;
  const HEADING = /^(#{1,6})\s+(.*)$/;
  const ITEM = /^\s*(?:[-*+]|(\d{1,9})[.)])\s+(.*)$/;
  // `code`, **bold**, __bold__, *italic*, _italic_ (not inside a word: snake_case_names stay as they are)
  const INLINE = new RegExp([/`([^`]+)`/, /\*\*(.+?)\*\*/, /__(.+?)__/, /\*([^*\s](?:[^*]*[^*\s])?)\*/,
    /(?<!\w)_([^_\s](?:[^_]*[^_\s])?)_(?!\w)/].map((r) => r.source).join("|"));

  function el(tag, text) {
    const e = document.createElement(tag);
    if (text !== undefined) e.textContent = text;
    return e;
  }

  function inline(parent, text) {
    let m;
    while ((m = INLINE.exec(text)) !== null) {
      if (m.index) parent.append(text.slice(0, m.index));
      if (m[1] !== undefined) parent.append(el("code", m[1]));
      else if (m[2] !== undefined || m[3] !== undefined) inline(parent.appendChild(el("strong")), m[2] ?? m[3]);
      else inline(parent.appendChild(el("em")), m[4] ?? m[5]);
      text = text.slice(m.index + m[0].length);
    }
    if (text) parent.append(text);
  }

  function startsBlock(line) {
    return !line.trim() || FENCE.test(line) || HEADING.test(line) || ITEM.test(line);
  }

  function codeBlock(out, lines, i, fence) {  // an unclosed fence (a reply still streaming) runs to the end
    let j = i + 1;
    while (j < lines.length && !lines[j].trim().startsWith(fence[1])) j++;
    const code = out.appendChild(el("pre")).appendChild(el("code", lines.slice(i + 1, j).join("\n")));
    if (fence[2]) code.dataset.lang = fence[2];
    return j + 1;
  }

  function list(out, lines, i) {
    const ordered = ITEM.exec(lines[i])[1] !== undefined;
    const box = out.appendChild(el(ordered ? "ol" : "ul"));
    if (ordered) box.start = parseInt(ITEM.exec(lines[i])[1], 10);
    let m;
    while (i < lines.length && (m = ITEM.exec(lines[i])) && (m[1] !== undefined) === ordered) {
      inline(box.appendChild(el("li")), m[2]);
      i++;
    }
    return i;
  }

  function paragraph(out, lines, i) {
    const p = out.appendChild(el("p"));
    do {
      if (p.firstChild) p.append(el("br"));
      inline(p, lines[i++]);
    } while (i < lines.length && !startsBlock(lines[i]));
    return i;
  }

  // text -> a DocumentFragment
  function render(text) {
    const out = document.createDocumentFragment();
    const lines = String(text).replace(/\r\n?/g, "\n").split("\n");
    let i = 0, m;
    while (i < lines.length) {
      if ((m = FENCE.exec(lines[i]))) i = codeBlock(out, lines, i, m);
      else if ((m = HEADING.exec(lines[i]))) { inline(out.appendChild(el("h" + m[1].length)), m[2]); i++; }
      else if (ITEM.test(lines[i])) i = list(out, lines, i);
      else if (!lines[i].trim()) i++;
      else i = paragraph(out, lines, i);
    }
    return out;
  }

  return { render };
})();
