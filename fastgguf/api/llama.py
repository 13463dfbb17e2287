"""llama-server's native completion API (POST /completion and /completions), over the same Scheduler as OpenAI's.

    prep = prepare_native(model, body, n_ctx)      # a NativePrepared (a protocol.Prepared), or APIError
    b = NativeBuilder(model, prep)                 # chunks(events) / feed(events) + final(), as ResponseBuilder

The request (llama-server's fields): `prompt` (a string; token ids; token ids and strings mixed in one list; a
{"prompt_string": ...} object; or a list of such prompts: one result each, a list), `n_predict` (-1: until
end-of-generation or a full context; `max_tokens` too), the sampling fields SamplingParams has under the same names
(temperature, top_k, top_p, min_p, repeat_penalty, repeat_last_n, frequency/presence_penalty, seed (-1: random),
stop, grammar, json_schema), `logit_bias` ([[token id or text, bias or false], ...] or {"id or text": bias}; a text
biases each of its tokens), `ignore_eos` (every end-of-generation token banned: logit_bias -inf), `n_probs`
(completion_probabilities: each token's logprob and the n_probs best, at most MAX_N_PROBS, before sampling),
`samplers` (a subset of
fastgguf's fixed order: the others are turned off), `stream`, `return_tokens`, `response_fields`,
`timings_per_token`, and `cache_prompt` / `id_slot` / `backend_sampling` (accepted: the slot's cached prefix is
always reused and the output does not depend on it). llama.cpp samplers fastgguf lacks (mirostat, typical_p, XTC,
DRY, dynamic temperature, top-n-sigma, adaptive-p) are accepted at their "off" values and refused otherwise, as is
`post_sampling_probs` (fastgguf reports the model's own distribution only). Errors are llama-server's shape
{"error": {"code", "message", "type"}} (error_dict). No web framework is imported here.
"""
import math
import time
from collections.abc import Mapping

from fastgguf.engine.scheduler import Delta, Done, Error, Finish
from fastgguf.api.openai.protocol import APIError, MAX_PROMPTS, Prepared, check_chars, check_model, constraints, \
    is_token_id, model_id, sampling_params
from fastgguf.api.openai.responses import error_body

__all__ = ["PATHS", "prepare_native", "NativePrepared", "NativeBuilder", "generation_settings", "error_dict", "Clock",
           "cached_tokens"]

PATHS = frozenset({"/completion", "/completions"})
RANDOM_SEED = 0xFFFFFFFF  # llama.cpp's LLAMA_DEFAULT_SEED: a random seed
MAX_N_PROBS = 100  # each token's entry costs a top-k over the vocabulary and n_probs JSON objects
SAMPLERS = ("penalties", "top_k", "top_p", "min_p", "temperature")  # fastgguf's order (engine.params)
_OFF = {"penalties": {"repeat_penalty": 1.0, "frequency_penalty": 0.0, "presence_penalty": 0.0},
        "top_k": {"top_k": 0}, "top_p": {"top_p": 1.0}, "min_p": {"min_p": 0.0}, "temperature": {"temperature": 1.0}}
_SAMPLER_CHARS = {"k": "top_k", "p": "top_p", "m": "min_p", "t": "temperature"}
# llama.cpp samplers fastgguf does not have, at the values that leave them off (also what generation_settings shows)
ABSENT = {"dynatemp_range": 0.0, "dynatemp_exponent": 1.0, "top_n_sigma": -1.0, "xtc_probability": 0.0,
          "xtc_threshold": 0.1, "typical_p": 1.0, "dry_multiplier": 0.0, "dry_base": 1.75, "dry_allowed_length": 2,
          "dry_penalty_last_n": -1, "mirostat": 0, "mirostat_tau": 5.0, "mirostat_eta": 0.1,
          "adaptive_target": -1.0, "adaptive_decay": 0.9}
_ENABLES = {"dynatemp_range": lambda v: v > 0, "top_n_sigma": lambda v: v > 0, "xtc_probability": lambda v: v > 0,
            "typical_p": lambda v: v < 1, "dry_multiplier": lambda v: v > 0, "mirostat": lambda v: v != 0,
            "adaptive_target": lambda v: v >= 0}


def error_dict(status, body):
    """llama-server's error shape of an OpenAI error dict (errors.error_body's): the HTTP status as `code`; `param`
    (the field at fault, or null) kept."""
    e = body["error"]
    return {"error": {"code": status, "message": e["message"], "type": e["type"], "param": e.get("param")}}


# -- the request -----------------------------------------------------------------------------------------------------

def _mixed(model, items, field, n_ctx):
    """llama-server's tokenize_mixed: strings (the first with BOS, special tokens parsed) and token ids, in order."""
    ids, first = [], True
    for x in items:
        if isinstance(x, str):
            check_chars(model, x, n_ctx, "prompt", field)
            ids += model.tokenize(x, add_special=first, parse_special=True)
        elif is_token_id(x):
            if not 0 <= x < model.n_vocab:
                raise APIError(f"{field}: token id {x} is out of range for a vocabulary of {model.n_vocab}",
                               param="prompt")
            ids.append(x)
        else:
            raise APIError(f"{field} must hold strings and token ids only", param="prompt")
        first = False
    return [int(t) for t in ids]


def _subprompt(model, p, field, n_ctx):
    if isinstance(p, Mapping):
        if "multimodal_data" in p:
            raise APIError("Multimodal data provided, but this model does not support multimodal requests",
                           param="prompt", code="unsupported_parameter")
        if "prompt_string" not in p:
            raise APIError(f"{field}: an object prompt needs prompt_string", param="prompt")
        p = p["prompt_string"]
    if isinstance(p, (str, list)):
        return _mixed(model, [p] if isinstance(p, str) else p, field, n_ctx)
    raise APIError(f"{field} must be a string, a list of tokens, a JSON object containing a prompt string, or a "
                   "list of mixed strings & tokens", param="prompt")


def _prompts(model, prompt, n_ctx):
    """The prompts (token id lists) of llama-server's `prompt` (tokenize_input_prompts): a list with no token id at
    its top level is several prompts; anything else is one."""
    if prompt is None:
        raise APIError("\"prompt\" is required", param="prompt")
    if isinstance(prompt, list) and not any(is_token_id(x) for x in prompt):
        if not prompt:
            raise APIError("\"prompt\" must not be empty", param="prompt")
        if len(prompt) > MAX_PROMPTS:
            raise APIError(f"prompt has {len(prompt)} prompts; at most {MAX_PROMPTS} are allowed", param="prompt")
        out = [_subprompt(model, p, f"prompt[{i}]", n_ctx) for i, p in enumerate(prompt)]
    else:
        out = [_subprompt(model, prompt, "prompt", n_ctx)]
    for i, ids in enumerate(out):
        if not ids:
            raise APIError("the prompt is empty: it has no tokens", param="prompt")
        if len(ids) >= n_ctx:
            raise APIError(f"the request exceeds the available context size: the prompt has {len(ids)} tokens, the "
                           f"context {n_ctx}; try increasing it (--ctx-size) or shortening the prompt",
                           param="prompt", code="exceed_context_size_error")
    return out


def _bias_value(v, where):
    if v is False:
        return -math.inf
    if isinstance(v, bool) or not isinstance(v, (int, float)):
        raise APIError(f"{where}: a bias must be a number or false (ban the token), got {v!r:.40}",
                       param="logit_bias")
    return float(v)


def _bias_tokens(model, key, where, as_key):
    """The token ids a logit_bias token stands for: an id; an object's key that is a decimal number (OpenAI's
    form); else a text's tokens."""
    if is_token_id(key):
        ids = [key]
    elif as_key and key.strip().lstrip("-").isdigit():
        ids = [int(key)]
    elif isinstance(key, str):
        ids = model.tokenize(key, add_special=False)
    else:
        raise APIError(f"{where}: a token must be a token id or a text, got {key!r:.40}", param="logit_bias")
    for t in ids:
        if not 0 <= t < model.n_vocab:
            raise APIError(f"{where}: token id {t} is out of range for a vocabulary of {model.n_vocab}",
                           param="logit_bias")
    return [int(t) for t in ids]


def logit_bias(model, value):
    """llama-server's logit_bias ([[token, bias], ...] or {token: bias}; a token is an id or a text, each of whose
    tokens is biased; a bias is a number or false: banned) -> {token id: bias}. Anything else is an APIError."""
    if value is None:
        return {}
    if isinstance(value, Mapping):
        pairs = list(value.items())
    elif isinstance(value, list):
        pairs = []
        for i, el in enumerate(value):
            if not isinstance(el, list) or len(el) != 2:
                raise APIError(f"logit_bias[{i}] must be a [token, bias] pair", param="logit_bias")
            pairs.append(tuple(el))
    else:
        raise APIError("logit_bias must be a list of [token, bias] pairs or an object {token: bias}",
                       param="logit_bias")
    out = {}
    for i, (key, v) in enumerate(pairs):
        where = f"logit_bias[{key!r:.40}]" if isinstance(value, Mapping) else f"logit_bias[{i}]"
        bias = _bias_value(v, where)
        for t in _bias_tokens(model, key, where, isinstance(value, Mapping)):
            out[t] = bias
    return out


def _samplers(value):
    """The SamplingParams overrides of llama-server's `samplers` (names, or a string of sampler characters): the
    samplers it leaves out are turned off; those it names must keep fastgguf's order."""
    if value is None:
        return {}
    names = [_SAMPLER_CHARS.get(c, c) for c in value] if isinstance(value, str) else value
    if not isinstance(names, list) or not all(isinstance(n, str) for n in names):
        raise APIError("samplers must be a list of sampler names or a string of sampler characters",
                       param="samplers")
    names = ["temperature" if n == "temp" else n for n in names]
    known = [n for n in names if n in SAMPLERS]
    unknown = [n for n in names if n not in SAMPLERS and n not in ("dry", "typ_p", "xtc", "top_n_sigma")]
    if unknown:
        raise APIError(f"samplers: unknown sampler {unknown[0]!r} (fastgguf has {', '.join(SAMPLERS)})",
                       param="samplers")
    if known != sorted(known, key=SAMPLERS.index):
        raise APIError(f"samplers: fastgguf applies its samplers in the order {', '.join(SAMPLERS)}",
                       param="samplers")
    off = {}
    for name in SAMPLERS:
        if name not in known:
            off.update(_OFF[name])
    return off


def _absent(body):
    for name, enables in _ENABLES.items():
        v = body.get(name)
        if v is not None and (isinstance(v, bool) or not isinstance(v, (int, float)) or enables(v)):
            raise APIError(f"{name} is not supported by fastgguf (only its off value {ABSENT[name]})",
                           param=name, code="unsupported_parameter")
    if body.get("post_sampling_probs"):
        raise APIError("post_sampling_probs is not supported: n_probs reports the model's distribution before "
                       "sampling", param="post_sampling_probs", code="unsupported_parameter")


def _flag(body, name):
    v = body.get(name, False)
    if v is None:
        return False
    if not isinstance(v, bool):
        raise APIError(f"{name} must be a boolean, got {type(v).__name__}", param=name)
    return v


def _int(body, name, default, lo, hi):
    v = body.get(name, default)
    if v is None:
        return default
    if isinstance(v, bool) or not isinstance(v, int) or not lo <= v <= hi:
        raise APIError(f"{name} must be an integer in [{lo}, {hi}], got {v!r:.40}", param=name)
    return v


class NativePrepared(Prepared):
    """A validated native completion request: Prepared (one choice per prompt; logprobs always on: each token's id
    comes with its entry) plus what shapes its answer: n_probs, return_tokens, response_fields, timings_per_token,
    ignore_eos, and the prompt texts."""

    def __init__(self, prompts, params, n_probs, stream, opts, constraint):
        super().__init__("completion.native", prompts, params, 1, n_probs, stream, False, constraints=constraint)
        self.n_probs = n_probs
        self.return_tokens = opts["return_tokens"]
        self.response_fields = opts["response_fields"]
        self.timings_per_token = opts["timings_per_token"]
        self.ignore_eos = opts["ignore_eos"]


def _sampling(model, body):
    """SamplingParams of a native body: llama-server's fields onto SamplingParams' (n_predict, a -1 seed, samplers,
    logit_bias and ignore_eos; the others have SamplingParams' names)."""
    _absent(body)
    b = {k: v for k, v in body.items() if k not in ("logit_bias", "n_predict", "max_tokens", "samplers")}
    n_predict = body.get("n_predict", body.get("max_tokens"))
    if n_predict is not None:
        if isinstance(n_predict, bool) or not isinstance(n_predict, int) or n_predict < -1:
            raise APIError(f"n_predict must be an integer >= -1, got {n_predict!r:.40}", param="n_predict")
        b["max_tokens"] = None if n_predict == -1 else n_predict
    if b.get("seed") in (-1, RANDOM_SEED):
        b["seed"] = None
    bias = logit_bias(model, body.get("logit_bias"))
    if _flag(body, "ignore_eos"):
        bias.update({int(t): -math.inf for t in model.tokenizer.eog_ids})
    b["logit_bias"] = bias or None
    defaults = {"max_tokens": None, **(getattr(model, "sampling_defaults", None) or {})}
    off = _samplers(body.get("samplers"))
    params = sampling_params(b, model.n_vocab, defaults)
    return params.replace(**off) if off else params


def prepare_native(model, body, n_ctx):
    """A /completion body -> NativePrepared (see the module docstring), or APIError naming the field."""
    if not isinstance(body, Mapping):
        raise APIError("the request body must be a JSON object")
    check_model(body, model)
    params = _sampling(model, body)
    prompts = _prompts(model, body.get("prompt"), n_ctx)
    fields = body.get("response_fields")
    if fields is not None and (not isinstance(fields, list) or not all(isinstance(f, str) for f in fields)):
        raise APIError("response_fields must be a list of field paths such as \"generation_settings/n_predict\"",
                       param="response_fields")
    for name in ("cache_prompt", "backend_sampling", "return_progress"):
        _flag(body, name)
    _int(body, "id_slot", -1, -1, 1 << 31)
    opts = {"return_tokens": _flag(body, "return_tokens"), "response_fields": fields or [],
            "timings_per_token": _flag(body, "timings_per_token"), "ignore_eos": _flag(body, "ignore_eos")}
    n_probs = _int(body, "n_probs", 0, 0, min(MAX_N_PROBS, model.n_vocab))
    return NativePrepared(prompts, params, n_probs, _flag(body, "stream"), opts,
                          constraints(model, params, len(prompts), "grammar"))


def generation_settings(params, *, n_probs=0, ignore_eos=False, stream=False, timings_per_token=False):
    """llama-server's generation_settings (and /props' default params) of a SamplingParams: fastgguf's fields, and
    llama.cpp's samplers fastgguf lacks at their off values (ABSENT). logit_bias: [{"bias", "token"}], a ban's bias
    null (JSON has no -inf)."""
    n_predict = -1 if params.max_tokens is None else params.max_tokens
    bias = [{"bias": b if math.isfinite(b) else None, "token": t} for t, b in (params.logit_bias or {}).items()]
    return {"seed": RANDOM_SEED if params.seed is None else params.seed, "temperature": params.temperature,
            "top_k": params.top_k, "top_p": params.top_p, "min_p": params.min_p,
            "repeat_last_n": params.repeat_last_n, "repeat_penalty": params.repeat_penalty,
            "presence_penalty": params.presence_penalty, "frequency_penalty": params.frequency_penalty, **ABSENT,
            "stop": list(params.stop), "max_tokens": n_predict, "n_predict": n_predict, "n_keep": 0, "n_discard": 0,
            "ignore_eos": ignore_eos, "stream": stream, "logit_bias": bias, "n_probs": n_probs, "min_keep": 0,
            "grammar": getattr(params.constraint(), "text", ""),
            "samplers": list(SAMPLERS), "timings_per_token": timings_per_token, "post_sampling_probs": False,
            "backend_sampling": False}


# -- the answer ------------------------------------------------------------------------------------------------------

def nested(paths, d):
    """llama-server's response_fields: {path: value} of each "a/b" path d has."""
    out = {}
    for path in paths:
        cur, ok = d, True
        for k in path.split("/"):
            if isinstance(cur, Mapping) and k in cur:
                cur = cur[k]
            else:
                ok = False
                break
        if ok:
            out[path] = cur
    return out


class Clock:
    """A request's times as its builder sees them, from the builder's creation (its submission): when its first
    token came (its prompt was evaluated by then) and when it ended; llama-server's `timings` and `prompt_progress`
    of them."""

    def __init__(self):
        self.t0, self.t_first, self.t_end = time.perf_counter(), None, None

    def token(self):
        if self.t_first is None:
            self.t_first = time.perf_counter()

    def end(self):
        self.t_end = time.perf_counter()

    def _ms(self):
        now = self.t_end or time.perf_counter()
        t_first = self.t_first or now
        return (t_first - self.t0) * 1e3, (now - t_first) * 1e3

    def timings(self, n_prompt, cached, n_predicted):
        """llama-server's timings: the prompt's evaluated tokens (cached ones apart) and the predicted ones."""
        prompt_ms, gen_ms = self._ms()
        n_eval = n_prompt - cached
        return {"cache_n": cached, "prompt_n": n_eval, "prompt_ms": prompt_ms,
                "prompt_per_token_ms": prompt_ms / max(n_eval, 1),
                "prompt_per_second": n_eval / (prompt_ms / 1e3) if prompt_ms > 0 else 0.0,
                "predicted_n": n_predicted, "predicted_ms": gen_ms,
                "predicted_per_token_ms": gen_ms / n_predicted if n_predicted else 0.0,
                "predicted_per_second": n_predicted / (gen_ms / 1e3) if gen_ms > 0 else 0.0}

    def progress(self, n_prompt, cached):
        """llama-server's prompt_progress once the prompt is evaluated (its first token came)."""
        return {"total": n_prompt, "cache": cached, "processed": n_prompt, "time_ms": self._ms()[0]}


def cached_tokens(prep):
    """The prompt tokens a one-prompt request found cached (0 before it is placed; several prompts: 0)."""
    req = prep.submitted
    return req.cached_tokens if req is not None and len(prep.prompts) == 1 else 0


class _Choice:
    """One prompt's result so far: its text, token ids, n_probs entries, end, and times."""

    def __init__(self):
        self.text, self.pending, self.tokens, self.probs = "", "", [], []
        self.finish = None
        self.clock = Clock()


class NativeBuilder:
    """The Scheduler's events of a NativePrepared -> llama-server's results: chunks(events) (a stream: one partial
    result per token, then the final one of each prompt) or feed(events) then final() (one result, or a list for
    several prompts)."""

    def __init__(self, model, prep):
        self.model, self.prep = model, prep
        self.model_name = model_id(model)
        self.choices = [_Choice() for _ in prep.prompts]
        self.usage = None
        self._prompt_texts = None

    def _tok(self, tid):
        b = self.model.tokenizer.token_to_piece(tid, special=True)
        return {"id": tid, "token": b.decode("utf-8", "ignore"), "bytes": list(b)}

    def _probs(self, entry):
        tid, lp, top = entry
        tops = [{**self._tok(t), "logprob": _finite(x)} for t, x in top]
        return {**self._tok(tid), "logprob": _finite(lp), "top_logprobs": tops}

    def _record(self, ev):
        """A Delta's text and tokens into its choice; returns the token entries it carried."""
        c = self.choices[ev.index]
        entries = ev.logprobs or []
        if entries:
            c.clock.token()
        c.text += ev.text
        c.tokens += [int(e[0]) for e in entries]
        if self.prep.n_probs:
            c.probs += [self._probs(e) for e in entries]
        return entries

    def _timings(self, i):
        c = self.choices[i]
        return c.clock.timings(len(self.prep.prompts[i]), cached_tokens(self.prep), len(c.tokens))

    def _partial(self, i, content, token, entry):
        c = self.choices[i]
        r = {"index": i, "content": content, "tokens": [token], "stop": False, "id_slot": -1,
             "tokens_predicted": len(c.tokens), "tokens_evaluated": len(self.prep.prompts[i])}
        if self.prep.timings_per_token:
            r["timings"] = self._timings(i)
        if self.prep.n_probs:
            r["completion_probabilities"] = [self._probs(entry)]
        return r

    def _result(self, i, stream):
        c, p = self.choices[i], self.prep
        reason, word = c.finish or ("length", None)
        if self._prompt_texts is None:
            self._prompt_texts = [self.model.tokenizer.detokenize(ids, skip_special=False) for ids in p.prompts]
        content = c.pending if stream else c.text
        r = {"index": i, "content": content, "tokens": [] if stream or not p.return_tokens else c.tokens,
             "id_slot": -1, "stop": True, "model": self.model_name, "tokens_predicted": len(c.tokens),
             "tokens_evaluated": len(p.prompts[i]),
             "generation_settings": generation_settings(p.params, n_probs=p.n_probs, ignore_eos=p.ignore_eos,
                                                        stream=p.stream, timings_per_token=p.timings_per_token),
             "prompt": self._prompt_texts[i], "has_new_line": "\n" in c.text, "truncated": False,
             "stop_type": "word" if word else "eos" if reason == "stop" else "limit", "stopping_word": word or "",
             "tokens_cached": len(p.prompts[i]) + len(c.tokens), "timings": self._timings(i)}
        if not stream and p.n_probs:
            r["completion_probabilities"] = c.probs
        return nested(p.response_fields, r) if p.response_fields else r

    def chunks(self, events):
        """The stream's results for a list of events (raises the request's error, if any): a partial result per
        token (text the decoder held back, with no token of its own, joins the next one or the final result)."""
        out = []
        for ev in events:
            if isinstance(ev, Delta):
                c = self.choices[ev.index]
                entries = self._record(ev)
                c.pending += ev.text
                for j, e in enumerate(entries):
                    text = c.pending if j == len(entries) - 1 else ""
                    out.append(self._partial(ev.index, text, int(e[0]), e))
                    if text:
                        c.pending = ""
            elif isinstance(ev, (Finish, Done, Error)):
                self.feed([ev])
                if isinstance(ev, Finish):
                    out.append(self._result(ev.index, True))
        return out

    def error_chunk(self, exc):
        status, body, _ = error_body(exc)
        return error_dict(status, body)

    def feed(self, events):
        for ev in events:
            if isinstance(ev, Delta):
                self._record(ev)
            elif isinstance(ev, Finish):
                c = self.choices[ev.index]
                c.finish = (ev.reason, ev.stop)
                c.clock.end()
            elif isinstance(ev, Done):
                self.usage = ev.usage
            elif isinstance(ev, Error):
                raise ev.error

    def final(self):
        results = [self._result(i, False) for i in range(len(self.choices))]
        return results[0] if len(results) == 1 else results


def _finite(x):
    return x if math.isfinite(x) else -9999.0
