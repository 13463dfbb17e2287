"""OpenAI request bodies -> prepared requests (the Scheduler's Request plus how to shape the answer).

    prep = prepare_chat(model, body, n_ctx)      # or prepare_completion / prepare_embedding
    req = prep.request(sink)                     # a fastgguf.engine.scheduler.Request

Every bad field is an APIError with `param` set, raised before anything is queued. The sampling fields are generated
from SamplingParams' fields (as the command line's flags are: fastgguf.cli.common), plus OpenAI's aliases; their
values are validated by SamplingParams, nowhere else. No web framework is imported here.
"""
import functools
import os
from collections.abc import Mapping

from fastgguf.engine.chat import tool_chat_prompt
from fastgguf.engine.grammar import Grammar, GrammarError, matchers
from fastgguf.engine.output import ChatOutputParser
from fastgguf.engine.pooling import max_input_tokens, pooling_of
from fastgguf.engine.params import SamplingParams, check_logit_bias
from fastgguf.engine.reasoning import MODES, THINK_CLOSE, detect_reasoning, is_harmony, reasoning_grammar, \
    starts_inside, template_kwargs
from fastgguf.engine.scheduler import Request
from fastgguf.engine.tools import HERMES_CLOSE, HERMES_OPEN, MISTRAL_TAG, ToolError, tool_grammar, validate_tools

__all__ = ["APIError", "prepare_completion", "prepare_chat", "prepare_embedding", "prepare_rerank", "Prepared",
           "EmbeddingPrepared", "RerankPrepared", "rerank_tokens", "MAX_PROMPTS",
           "sampling_params", "check_model", "model_id", "file_id", "SAMPLING_FIELDS", "PASSED_FIELDS"]

MAX_N = 16
MAX_EMBED_INPUTS = 2048  # as OpenAI
# prompts in one /v1/completions request (checked before any is tokenized); each prompt x n is a sequence, and the
# engine's queue (--max-queue) bounds the sequences waiting, so this mostly bounds the work of reading a request
MAX_PROMPTS = 2048
UNSUPPORTED = "not supported yet"

# (request field, SamplingParams field), in the order they are read: where a body gives a field under two names,
# the later one wins (repeat_penalty over llama.cpp's repetition_penalty; OpenAI's newer max_completion_tokens
# over max_tokens).
SAMPLING_FIELDS = (("repetition_penalty", "repeat_penalty"),
                   *((name, name) for name in SamplingParams.names()),
                   ("max_completion_tokens", "max_tokens"))
# the chat fields another API's body (Responses, Messages) passes through as they are: fastgguf's sampling
# extensions (seed, top_k, min_p, logit_bias, ...; clients send them as extra_body) and reasoning_format; the length
# and stop fields each API names its own way
PASSED_FIELDS = frozenset({api for api, _ in SAMPLING_FIELDS} - {"max_tokens", "max_completion_tokens", "stop"}
                          | {"reasoning_format"})


class APIError(ValueError):
    """A request the API refuses, in OpenAI's error shape: `status` (HTTP), `type`, `param`, `code`, and `extra`
    fields of the error object (llama-server's n_prompt_tokens and n_ctx of a prompt too long)."""

    def __init__(self, message, *, status=400, type="invalid_request_error", param=None, code=None, headers=None,
                 extra=None):
        super().__init__(message)
        self.message, self.status, self.type, self.param, self.code = message, status, type, param, code
        self.headers, self.extra = headers or {}, extra or {}

    def body(self):
        return {"error": {"message": self.message, "type": self.type, "param": self.param, "code": self.code,
                          **self.extra}}


def model_id(model):
    """The id the API shows for a model: its `alias` attribute when set (`fastgguf serve --alias`), else file_id."""
    return getattr(model, "alias", None) or file_id(model)


def file_id(model):
    """A model's file name without .gguf (never its directory: a client must not learn the server's paths)."""
    name = os.path.basename(getattr(model, "path", "") or "model")
    return name[:-5] if name.lower().endswith(".gguf") else name


def _param_of(exc, given):
    """The request field a SamplingParams error names (its message starts with the SamplingParams field)."""
    head = str(exc).split(" ", 1)[0].split("[", 1)[0].rstrip(":")
    return given.get(head, head or None)


def _response_format(body):
    """OpenAI's response_format -> the SamplingParams field it sets: {} (text), {"grammar": any JSON object} or
    {"json_schema": schema}. A json_schema is enforced whether `strict` is true or false (a schema that cannot be
    enforced exactly is refused, never loosened)."""
    rf = body.get("response_format")
    if rf is None:
        return {}
    if not isinstance(rf, Mapping):
        raise APIError("response_format must be an object such as {\"type\": \"json_object\"}",
                       param="response_format")
    kind = rf.get("type")
    if kind == "text":
        return {}
    if kind == "json_object":  # llama-server's "schema" beside it: that schema (an empty one: any object)
        schema = rf.get("schema")
        if schema is not None and not isinstance(schema, Mapping):
            raise APIError("response_format.schema must be a JSON Schema object", param="response_format")
        return {"json_schema": schema} if schema else {"grammar": Grammar.json_object()}
    if kind != "json_schema":
        raise APIError(f"response_format.type must be 'text', 'json_object' or 'json_schema', got {kind!r}",
                       param="response_format")
    js = rf.get("json_schema")
    if not isinstance(js, Mapping):
        raise APIError("response_format.json_schema must be an object {\"name\", \"schema\", \"strict\"}",
                       param="response_format")
    if not isinstance(js.get("name", ""), str):
        raise APIError("response_format.json_schema.name must be a string", param="response_format")
    if not isinstance(js.get("strict", False), (bool, type(None))):
        raise APIError("response_format.json_schema.strict must be a boolean", param="response_format")
    schema = js.get("schema")
    if not isinstance(schema, Mapping):
        raise APIError("response_format.json_schema.schema (a JSON Schema object) is required",
                       param="response_format")
    return {"json_schema": schema}


def sampling_params(body, n_vocab, defaults=None):
    """SamplingParams from an OpenAI request body (absent or null fields keep `defaults`' values where it names them
    (the server's: `fastgguf serve --speculative`), else SamplingParams' defaults).
    response_format, and llama.cpp's top-level `json_schema` and `grammar` (GBNF), constrain the output: one of
    them at a time; any grammar that cannot be enforced is an APIError naming the field, before anything runs."""
    kw, given = dict(defaults or {}), {}  # given: SamplingParams field -> the request field its value came from
    for api, name in SAMPLING_FIELDS:
        v = body.get(api)
        if v is not None:
            kw[name], given[name] = v, api
    try:
        constraint = _response_format(body)
    except ImportError as e:  # llguidance missing: refused, never run unconstrained
        raise APIError(str(e), param="response_format", code="missing_dependency") from None
    for name, v in constraint.items():
        if "json_schema" in kw or "grammar" in kw:
            raise APIError("response_format, json_schema and grammar each constrain the output: give one",
                           param="response_format")
        kw[name], given[name] = v, "response_format"
    if "logit_bias" in kw:
        try:
            kw["logit_bias"] = check_logit_bias(kw["logit_bias"], n_vocab)
        except (TypeError, ValueError) as e:
            raise APIError(str(e), param="logit_bias") from None
    try:
        return SamplingParams(**kw)
    except (TypeError, ValueError) as e:
        raise APIError(str(e), param=_param_of(e, given)) from None
    except ImportError as e:  # llguidance missing: refused, never run unconstrained
        field = given.get("json_schema") or given.get("grammar")
        raise APIError(str(e), param=field, code="missing_dependency") from None


def constraints(model, params, n_choices, param="response_format"):
    """One grammar Matcher per choice when params carry a constraint (else None): compiled here, where the request
    is prepared (a server's worker thread), never on the engine thread."""
    g = params.constraint()
    if g is None:
        return None
    try:
        return matchers(model, g, n_choices)
    except ImportError as e:
        raise APIError(str(e), code="missing_dependency") from None
    except ValueError as e:  # GrammarError: the grammar does not fit this vocabulary
        raise APIError(str(e), param=param) from None


def _int_field(body, name, default, lo, hi):
    v = body.get(name)
    if v is None:
        return default
    if isinstance(v, bool) or not isinstance(v, int):
        raise APIError(f"{name} must be an integer, got {type(v).__name__}", param=name)
    if not lo <= v <= hi:
        raise APIError(f"{name} must be in [{lo}, {hi}], got {v}", param=name)
    return v


def _bool_field(body, name):
    v = body.get(name)
    if v is None:
        return False
    if not isinstance(v, bool):
        raise APIError(f"{name} must be a boolean, got {type(v).__name__}", param=name)
    return v


def _unsupported(body):
    if body.get("suffix"):
        raise APIError(f"suffix is {UNSUPPORTED}", param="suffix", code="unsupported_parameter")
    bo = body.get("best_of")
    if bo not in (None, 1) and bo != body.get("n", 1):
        raise APIError(f"best_of is {UNSUPPORTED}", param="best_of", code="unsupported_parameter")


def check_model(body, model):
    """A body's `model`, when given, must be a string. Any name is served by the one model (as llama-server and LM
    Studio do: clients send "gpt-3.5-turbo", a Claude name, "test"), unless the model's `strict_model_names` is set
    (`fastgguf serve --strict-model-names`): then APIError 404 unless it names this one: its id (model_id: the alias
    when set), or its file name with or without .gguf (what clients configured before an alias was given still
    send); never its path on the server's disk, which a client must not be able to probe."""
    name = body.get("model")
    if name is None:
        return
    if not isinstance(name, str):
        raise APIError("model must be a string", param="model")
    mid = model_id(model)
    if getattr(model, "strict_model_names", False) and name not in (mid, file_id(model), file_id(model) + ".gguf"):
        raise APIError(f"The model {name!r} does not exist (this server serves {mid!r})", status=404,
                       param="model", code="model_not_found")


def _stream_options(body, stream):
    so = body.get("stream_options")
    if so is None:
        return False
    if not isinstance(so, Mapping):
        raise APIError("stream_options must be an object", param="stream_options")
    if not stream:
        raise APIError("stream_options is only allowed with stream=true", param="stream_options")
    iu = so.get("include_usage")
    if iu is not None and not isinstance(iu, bool):
        raise APIError("stream_options.include_usage must be a boolean", param="stream_options")
    return bool(iu)


def check_chars(model, text, n_tokens, param, where=None):
    """APIError (context_length_exceeded) for a text with more characters than n_tokens tokens can spell
    (Tokenizer.max_chars), before it is tokenized: what a request may cost is bounded by the context, not by the
    body size (megabytes of text take seconds to tokenize)."""
    limit = model.tokenizer.max_chars(n_tokens)
    if limit is not None and len(text) > limit:
        at_least = -(-len(text) * n_tokens // limit)  # the fewest tokens that can spell it (n_prompt_tokens)
        raise too_long(f"This model's maximum context length is {n_tokens} tokens. However, {where or param} has "
                       f"{len(text)} characters, more than {n_tokens} tokens can spell (at most {limit}): at least "
                       f"{at_least} tokens. Please reduce the prompt.", at_least, n_tokens, param)


def too_long(message, n_prompt, n_ctx, param="messages"):
    """The APIError of a prompt that does not fit the context: 400 with OpenAI's code context_length_exceeded and
    llama-server's type exceed_context_size_error, n_prompt_tokens and n_ctx (each sequence's context)."""
    return APIError(message, param=param, type="exceed_context_size_error", code="context_length_exceeded",
                    extra={"n_prompt_tokens": n_prompt, "n_ctx": n_ctx})


def _fit(prompts, params, n_ctx, body):
    """Each prompt fits the context (too_long), with the max_tokens the body asks for (a default max_tokens does
    not refuse a request: its generation ends where the context does, finish_reason "length", as llama-server's)."""
    asked = body.get("max_tokens") is not None or body.get("max_completion_tokens") is not None
    for p in prompts:
        n = len(p)
        if asked and params.max_tokens is not None and n + params.max_tokens > n_ctx:
            raise too_long(f"This model's maximum context length is {n_ctx} tokens. However, you requested "
                           f"{n + params.max_tokens} tokens ({n} in the prompt, {params.max_tokens} for the "
                           f"completion). Please reduce the prompt or max_tokens.", n, n_ctx)
        if n >= n_ctx:
            raise too_long(f"This model's maximum context length is {n_ctx} tokens. However, the prompt has {n} "
                           f"tokens. Please reduce the prompt.", n, n_ctx)


class Prepared:
    """A validated request: what the Scheduler needs and how to shape the answer."""

    def __init__(self, kind, prompts, params, n, logprobs, stream, include_usage, echo_texts=None, *,
                 constraints=None, parser=None, prompt_text=None, verbose=False, progress=False):
        self.kind, self.prompts, self.params, self.n = kind, prompts, params, n
        self.logprobs, self.stream, self.include_usage = logprobs, stream, include_usage
        self.echo_texts = echo_texts  # completions with echo: the prompt text per prompt
        self.prompt_logprobs = echo_texts is not None and logprobs is not None  # echo's tokens get logprobs too
        self.constraints = constraints  # one grammar Matcher per choice (compiled here, not on the engine thread)
        self.parser = parser  # () -> a choice's ChatOutputParser (tool calls, reasoning), or None: plain content
        self.prompt_text = prompt_text  # a chat's rendered prompt (llama-server's /apply-template)
        self.verbose = verbose  # llama-server's `verbose`: the response shows the prompt text in its __verbose
        self.progress = progress  # llama-server's `return_progress`: a stream's chunks show the prompt's evaluation
        self.submitted = None

    def request(self, sink, loop=None):
        """The Scheduler's Request of this one, kept as `submitted` (its counters, such as cached_tokens once its
        first sequence is placed, are what a builder reports before the request's Done)."""
        self.submitted = Request(self.prompts, self.params, sink, n=self.n, logprobs=self.logprobs, loop=loop,
                                 prompt_logprobs=self.prompt_logprobs, constraints=self.constraints,
                                 parser=self.parser, progress=self.progress)
        return self.submitted


def _common(model, body, kind, defaults=None):
    """(stream, include_usage, n, SamplingParams) of a generation body; `defaults`: SamplingParams fields for those
    the body does not give, over the server's (model.sampling_defaults)."""
    if not isinstance(body, Mapping):
        raise APIError("the request body must be a JSON object")
    check_model(body, model)
    _unsupported(body)
    stream = _bool_field(body, "stream")
    include_usage = _stream_options(body, stream)
    n = _int_field(body, "n", 1, 1, MAX_N)
    params = sampling_params(body, model.n_vocab, {**(getattr(model, "sampling_defaults", None) or {}),
                                                    **(defaults or {})})
    return stream, include_usage, n, params


def _prompt_list(model, prompt, field, max_tokens):
    """OpenAI's prompt (or embedding input: field="input"): a string, a list of strings, a list of token ids, or a
    list of lists of token ids. Returns a list of token id lists. A string too long for max_tokens (check_chars)
    is refused before it is tokenized."""
    n_vocab = model.n_vocab

    def ids_of(x, where):
        if isinstance(x, str):
            check_chars(model, x, max_tokens, field, where)
            ids = list(model.tokenize(x))
        elif isinstance(x, list) and all(is_token_id(t) for t in x):
            for t in x:
                if not 0 <= t < n_vocab:
                    raise APIError(f"{where}: token id {t} is out of range for a vocabulary of {n_vocab}",
                                   param=field)
            ids = list(x)
        else:
            raise APIError(f"{field} must be a string, a list of strings, a list of token ids or a list of such "
                           "lists", param=field)
        if not ids:
            raise APIError(f"{where} is empty", param=field)
        return ids
    if prompt is None:
        raise APIError(f"{field} is required", param=field)
    if isinstance(prompt, str) or (isinstance(prompt, list) and prompt and is_token_id(prompt[0])):
        return [ids_of(prompt, field)]
    if isinstance(prompt, list) and prompt:
        return [ids_of(p, f"{field}[{i}]") for i, p in enumerate(prompt)]
    raise APIError(f"{field} must be a non-empty string or list", param=field)


def is_token_id(x):
    """An int that is not a bool (how a token id arrives in JSON)."""
    return isinstance(x, int) and not isinstance(x, bool)


def prepare_completion(model, body, n_ctx, *, defaults=None):
    """A /v1/completions body -> Prepared. defaults: SamplingParams fields for those the body does not give (Ollama's
    negative num_predict: {"max_tokens": None}, no limit but the context)."""
    stream, include_usage, n, params = _common(model, body, "completion", defaults)
    for field in ("tools", "tool_choice"):
        if body.get(field) is not None:
            raise APIError(f"{field} is only for chat completions", param=field)
    prompt = body.get("prompt")
    if isinstance(prompt, list) and len(prompt) > MAX_PROMPTS and not is_token_id(prompt[0]):
        raise APIError(f"prompt has {len(prompt)} prompts; at most {MAX_PROMPTS} are allowed per request",
                       param="prompt")
    prompts = _prompt_list(model, prompt, "prompt", n_ctx)
    lp = body.get("logprobs")
    if lp is not None and (isinstance(lp, bool) or not isinstance(lp, int) or not 0 <= lp <= 20):
        raise APIError("logprobs must be an integer in [0, 20] for completions", param="logprobs")
    echo = _bool_field(body, "echo")
    _fit(prompts, params, n_ctx, body)
    echo_texts = [model.detokenize(p) for p in prompts] if echo else None
    return Prepared("text_completion", prompts, params, n, lp, stream, include_usage, echo_texts,
                    constraints=constraints(model, params, len(prompts) * n))


class EmbeddingPrepared:
    """A validated /v1/embeddings request: prompts (token id lists), encoding_format ("float" or "base64")."""
    stream = False

    def __init__(self, prompts, encoding_format):
        self.prompts, self.encoding_format = prompts, encoding_format

    def request(self, sink, loop=None):
        return Request(self.prompts, None, sink, loop=loop, embed=True)


def prepare_embedding(model, body, n_ctx, per_token=False):
    """/v1/embeddings: input is a string, a list of strings, a list of token ids or a list of such lists (no
    empty strings: OpenAI refuses them too); each at most n_ctx tokens (a non-causal model: also at most its
    training context, fastgguf.engine.pooling.max_input_tokens). A model whose pooling is "none" gives per-token
    vectors, which OpenAI's shape cannot hold: refused as llama-server does, unless per_token (Model.embed)."""
    if not isinstance(body, Mapping):
        raise APIError("the request body must be a JSON object")
    check_model(body, model)
    if pooling_of(model) == "none" and not per_token:
        raise APIError("Pooling type 'none' is not OAI compatible: this model's file gives per-token vectors "
                       "(Model.embed returns them in-process)", param="input")
    if pooling_of(model) == "rank":
        raise APIError("this model is a reranker (pooling rank): use /v1/rerank", param="model")
    fmt = body.get("encoding_format")
    fmt = "float" if fmt is None else fmt
    if fmt not in ("float", "base64"):
        raise APIError(f"encoding_format must be 'float' or 'base64', got {fmt!r}", param="encoding_format")
    dims = body.get("dimensions")
    if dims is not None and dims != model.n_embd:
        raise APIError(f"dimensions must be {model.n_embd} (this model's embedding size); other sizes are "
                       f"{UNSUPPORTED}", param="dimensions", code="unsupported_parameter")
    inp = body.get("input")
    if isinstance(inp, Mapping) and "content" in inp:
        inp = _content_text(inp, "input")
    elif isinstance(inp, list) and inp and not is_token_id(inp[0]):
        inp = [_content_text(x, f"input[{i}]") if isinstance(x, Mapping) else x for i, x in enumerate(inp)]
    if inp == "" or (isinstance(inp, list) and "" in inp):
        raise APIError("input: an empty string cannot be embedded", param="input")
    if isinstance(inp, list) and len(inp) > MAX_EMBED_INPUTS and not is_token_id(inp[0]):
        raise APIError(f"input has {len(inp)} items; at most {MAX_EMBED_INPUTS} are allowed", param="input")
    prompts = _prompt_list(model, inp, "input", max_input_tokens(model, n_ctx))
    _fit_inputs(model, prompts, n_ctx, "input")
    return EmbeddingPrepared(prompts, fmt)


def _content_text(item, where):
    """llama-server's embedding input {"content": [{"type": "text", "text": ...}, ...]} -> its texts joined (other
    parts: images, audio, video, are refused: no model here takes them)."""
    parts = item.get("content")
    if not isinstance(parts, list):
        raise APIError(f"{where}: \"content\" must be an array of text parts", param="input")
    for j, part in enumerate(parts):
        kind = part.get("type") if isinstance(part, Mapping) else None
        if kind in ("image_url", "input_audio", "input_video", "file"):
            raise APIError(f"{where}.content[{j}]: {kind} parts are {UNSUPPORTED} (this model is not multimodal)",
                           param="input", code="unsupported_parameter")
        if kind != "text" or not isinstance(part.get("text"), str):
            raise APIError(f"{where}.content[{j}] must be a text part {{'type': 'text', 'text': ...}}",
                           param="input")
    return "".join(part["text"] for part in parts)


def _fit_inputs(model, prompts, n_ctx, field):
    """Each input whole within the longest an embedding input may be: an error, never a silent truncation
    (llama.cpp refuses too)."""
    limit = max_input_tokens(model, n_ctx)
    for i, ids in enumerate(prompts):
        if len(ids) > limit:
            raise APIError(f"This model's maximum context length is {limit} tokens. However, {field}[{i}] has "
                           f"{len(ids)} tokens. Please reduce the input.", param=field,
                           code="context_length_exceeded")


class RerankPrepared:
    """A validated /v1/rerank request: one prompt per document (query and document put together as
    rerank_tokens does), top_n, return_documents and the documents."""
    stream = False

    def __init__(self, prompts, documents, top_n, return_documents):
        self.prompts, self.documents = prompts, documents
        self.top_n, self.return_documents = top_n, return_documents

    def request(self, sink, loop=None):
        return Request(self.prompts, None, sink, loop=loop, embed=True)


RERANK_TEMPLATE_KEY = "tokenizer.chat_template.rerank"


def rerank_tokens(model, query, document):
    """The token ids of one (query, document) pair, as llama-server's format_prompt_rerank: the file's rerank
    template (tokenizer.chat_template.rerank, Qwen3 rerankers) with {query} and {document} replaced, special
    tokens parsed and none added; else BOS (if the vocabulary adds it) query EOS (if it adds EOS) SEP (if it
    adds SEP) document EOS (if it adds EOS), query and document tokenized without special tokens (a BERT
    cross-encoder: [CLS] query [SEP] document)."""
    tmpl = model.metadata.get(RERANK_TEMPLATE_KEY)
    if isinstance(tmpl, str):
        text = tmpl.replace("{query}", query).replace("{document}", document)
        return list(model.tokenize(text, add_special=False, parse_special=True))
    tok = model.tokenizer
    eos = tok.eos_id if tok.eos_id is not None else tok.special_ids.get("sep")
    ids = [tok.bos_id] if tok.add_bos and tok.bos_id is not None else []
    ids += model.tokenize(query, add_special=False)
    if tok.add_eos and eos is not None:
        ids.append(eos)
    if tok.add_sep and tok.special_ids.get("sep") is not None:  # WPM; tokenizer.ggml.add_sep_token
        ids.append(tok.special_ids["sep"])
    ids += model.tokenize(document, add_special=False)
    if tok.add_eos and eos is not None:
        ids.append(eos)
    return ids


def prepare_rerank(model, body, n_ctx):
    """/v1/rerank (the Jina / Cohere shape llama-server takes): query (a string), documents (a non-empty list of
    strings), top_n (default: all), return_documents. The model must be a reranker (pooling rank)."""
    if not isinstance(body, Mapping):
        raise APIError("the request body must be a JSON object")
    check_model(body, model)
    pooling = model.hparams.pooling
    if pooling != "rank":
        said = f"pooling {pooling!r}" if pooling else "no pooling_type (a chat model)"
        raise APIError(f"this model is not a reranker: its file says {said}; rerank needs pooling 'rank' (a "
                       f"reranker such as a Qwen3-Reranker or a BERT cross-encoder GGUF)", param="model",
                       code="model_not_reranker")
    query = body.get("query")
    if not isinstance(query, str):
        raise APIError("query must be a string" if query is not None else "query is required", param="query")
    docs = body.get("documents")
    if not isinstance(docs, list) or not docs or not all(isinstance(d, str) for d in docs):
        raise APIError("documents must be a non-empty list of strings", param="documents")
    if len(docs) > MAX_EMBED_INPUTS:
        raise APIError(f"documents has {len(docs)} items; at most {MAX_EMBED_INPUTS} are allowed",
                       param="documents")
    top_n = _int_field(body, "top_n", len(docs), 1, 1 << 31)
    return_documents = _bool_field(body, "return_documents")
    limit = max_input_tokens(model, n_ctx)
    for i, d in enumerate(docs):
        check_chars(model, query + d, limit, "documents", f"the query with documents[{i}]")
    prompts = [rerank_tokens(model, query, d) for d in docs]
    if any(not p for p in prompts):
        raise APIError("documents: an empty query and document give no tokens to score", param="documents")
    _fit_inputs(model, prompts, n_ctx, "documents")
    return RerankPrepared(prompts, docs, min(top_n, len(docs)), return_documents)

_ROLES = {"system": "system", "developer": "system", "user": "user", "assistant": "assistant", "tool": "tool"}


def _messages(messages):
    if not isinstance(messages, list) or not messages:
        raise APIError("messages must be a non-empty list of message objects", param="messages")
    out = []
    for i, m in enumerate(messages):
        if not isinstance(m, Mapping):
            raise APIError(f"messages[{i}] must be an object", param="messages")
        role = m.get("role")
        if role not in _ROLES:
            raise APIError(f"messages[{i}].role must be one of {', '.join(_ROLES)}, got {role!r}",
                           param="messages")
        content = m.get("content")
        if isinstance(content, list):
            parts = []
            for j, part in enumerate(content):
                if isinstance(part, Mapping) and part.get("type") == "text" and isinstance(part.get("text"), str):
                    parts.append(part["text"])
                elif isinstance(part, Mapping) and part.get("type") in ("image_url", "input_audio", "file"):
                    raise APIError(f"messages[{i}].content[{j}]: {part.get('type')} parts are {UNSUPPORTED}",
                                   param="messages", code="unsupported_parameter")
                else:
                    raise APIError(f"messages[{i}].content[{j}] must be a text part "
                                   f"{{'type': 'text', 'text': ...}}", param="messages")
            content = "".join(parts)
        elif content is None:
            if not (role == "assistant" and m.get("tool_calls")):
                raise APIError(f"messages[{i}].content is required", param="messages")
        elif not isinstance(content, str):
            raise APIError(f"messages[{i}].content must be a string or a list of text parts", param="messages")
        _check_tool_calls(m.get("tool_calls"), i, role)
        msg = {k: v for k, v in m.items() if k not in ("role", "content")}
        msg["role"], msg["content"] = _ROLES[role], content
        out.append(msg)
    return out


def _check_tool_calls(calls, i, role):
    """An assistant's tool_calls history: a list of {"id", "type": "function", "function": {"name": str,
    "arguments": JSON text or object}} (content may then be null: the templates get "")."""
    if calls is None:
        return
    where = f"messages[{i}].tool_calls"
    if role != "assistant":
        raise APIError(f"{where}: only an assistant message has tool_calls", param="messages")
    if not isinstance(calls, list):
        raise APIError(f"{where} must be a list", param="messages")
    for j, c in enumerate(calls):
        fn = c.get("function") if isinstance(c, Mapping) else None
        if not (isinstance(fn, Mapping) and isinstance(fn.get("name"), str)
                and isinstance(fn.get("arguments", ""), (str, Mapping))):
            raise APIError(f"{where}[{j}] must be {{\"id\": ..., \"type\": \"function\", \"function\": {{\"name\": "
                           f"a string, \"arguments\": JSON text}}}}", param="messages")


def _continuation(body, msgs):
    """(add_generation_prompt, continue_final) of a chat body, as llama-server decides them: a final assistant
    message (without tool_calls) is a prefill the reply continues, unless continue_final_message is false;
    continue_final_message true asks for it explicitly, and then add_generation_prompt must be false (vLLM's
    rule)."""
    add = body.get("add_generation_prompt")
    cont = body.get("continue_final_message")
    for name, v in (("add_generation_prompt", add), ("continue_final_message", cont)):
        if v is not None and not isinstance(v, bool):
            raise APIError(f"{name} must be a boolean, got {type(v).__name__}", param=name)
    last = msgs[-1]
    prefill = last["role"] == "assistant" and not last.get("tool_calls")
    if cont is None and prefill:
        if len(msgs) >= 2 and msgs[-2]["role"] == "assistant":
            raise APIError("Cannot have 2 or more assistant messages at the end of the list.", param="messages")
        return False, True
    if cont and add is not False:
        raise APIError("Cannot set both add_generation_prompt and continue_final_message to true.",
                       param="continue_final_message")
    if cont and not prefill:
        raise APIError("continue_final_message needs a final assistant message without tool_calls",
                       param="continue_final_message")
    return add is not False, bool(cont)


def prepare_chat(model, body, n_ctx, *, reasoning_format="parsed", defaults=None):
    """A /v1/chat/completions body -> Prepared. reasoning_format: the default of the body's `reasoning_format`
    (how a thinking model's <think> block is returned: "parsed" into reasoning_content, "raw" in content, "none"
    dropped; the server's --reasoning-format); defaults: as prepare_completion's."""
    stream, include_usage, n, params = _common(model, body, "chat.completion", defaults)
    msgs = _messages(body.get("messages"))
    lp = body.get("logprobs")
    if lp is not None and not isinstance(lp, bool):
        raise APIError("logprobs must be a boolean for chat completions", param="logprobs")
    top = _int_field(body, "top_logprobs", None, 0, 20)
    if top is not None and not lp:
        raise APIError("top_logprobs requires logprobs=true", param="top_logprobs")
    config = tool_config(body)
    mode = reasoning_mode(body, reasoning_format)
    user = params   # its constraint (json_schema / grammar / response_format) is applied after the template's stops
    fits = functools.partial(check_chars, model, n_tokens=n_ctx, param="messages", where="the rendered chat prompt")
    try:
        add, cont = _continuation(body, msgs)
        text, ids, params, fmt, template = tool_chat_prompt(model, msgs, params.replace(json_schema=None,
                                                                                        grammar=None),
                                                            config, check_text=fits, add_generation_prompt=add,
                                                            continue_final=cont, **template_kwargs(mode))
    except APIError:  # check_text's
        raise
    except ToolError as e:
        raise APIError(str(e), param=e.param) from None
    except (TypeError, ValueError) as e:
        raise APIError(str(e), param="messages") from None
    # the model thinks in this request: its template has the <think> channel and the prompt leaves it open (harmony:
    # the analysis channel, always open to a gpt-oss reply)
    harmony = is_harmony(template)
    thinks = detect_reasoning(template) and not text.rstrip().endswith(THINK_CLOSE)
    inside = thinks and not harmony and starts_inside(text)
    tool_fmt = fmt if config is not None and config.choice != "none" else None
    markers = special_ids(model.tokenizer, tool_fmt) if tool_fmt is not None else {}
    params = chat_constraint(model, params, user, config, tool_fmt, thinks, inside, markers, harmony)
    prompts = [ids]
    _fit(prompts, params, n_ctx, body)
    parser = None
    if tool_fmt is not None or thinks:
        # markers that are control tokens must reach the parser as text: the decoder then renders special tokens
        parser = functools.partial(ChatOutputParser, tool_fmt, (mode, inside, harmony) if thinks else None,
                                   special_text=bool(markers))
    return Prepared("chat.completion", prompts, params, n, (top or 0) if lp else None, stream, include_usage,
                    constraints=constraints(model, params, n, "tools" if tool_fmt else "response_format"),
                    parser=parser, prompt_text=text, verbose=_bool_field(body, "verbose"),
                    progress=stream and _bool_field(body, "return_progress"))


def tool_config(body):
    """The request's tools.ToolConfig (tools, tool_choice, parallel_tool_calls), or None without tools."""
    try:
        return validate_tools(body.get("tools"), body.get("tool_choice"), body.get("parallel_tool_calls"))
    except ToolError as e:
        raise APIError(str(e), param=e.param) from None


def reasoning_mode(body, default="parsed"):
    mode = body.get("reasoning_format", default)
    if mode not in MODES:
        raise APIError(f"reasoning_format must be one of {', '.join(MODES)}, got {mode!r}", param="reasoning_format")
    return mode


# the tool-call markers a vocabulary may hold as control tokens (which text cannot spell: the grammar names them)
_MARKERS = {"hermes": (HERMES_OPEN, HERMES_CLOSE), "mistral": (MISTRAL_TAG,)}


def special_ids(tokenizer, fmt):
    """{marker: token id} for format fmt's markers that are one control token of the vocabulary."""
    out = {}
    for m in _MARKERS.get(fmt, ()):
        ids = list(tokenizer.tokenize(m, add_special=False, parse_special=True))
        if (len(ids) == 1 and not tokenizer.token_to_piece(ids[0])
                and tokenizer.token_to_piece(ids[0], special=True) == m.encode()):
            out[m] = int(ids[0])
    return out


def chat_constraint(model, params, user, config, tool_fmt, thinks, inside, markers, harmony=False):
    """params (the template's, unconstrained) with the reply's constraint: the tool grammar (tool_fmt: a format,
    None for no tools or tool_choice "none"), else the user's (user.constraint(): json_schema, grammar,
    response_format), wrapped by reasoning_grammar when the model thinks (harmony: the analysis message first, the
    grammar in the final channel). A constrained reply keeps only the
    user's stop strings, which SamplingParams then refuses: the ChatML fallback's "<|im_end|>" stop goes, the
    grammar ends the reply with end of generation."""
    own = user.constraint()
    lark = None
    if tool_fmt is not None:
        if own is not None:
            raise APIError(f"response_format / json_schema / grammar together with tools is {UNSUPPORTED}",
                           param="response_format", code="unsupported_parameter")
        try:
            lark = tool_grammar(config, tool_fmt, markers)
        except ToolError as e:
            raise APIError(str(e), param=e.param) from None
    elif own is not None and thinks:
        lark = own.text
    if lark is None and own is None:
        return params
    try:
        if lark is None:
            return params.replace(stop=user.stop, json_schema=user.json_schema, grammar=user.grammar)
        if thinks:
            try:
                lark = reasoning_grammar(lark, inside=inside, harmony=harmony)
            except ValueError as e:
                raise APIError(f"this constraint cannot follow the model's reasoning: {e}",
                               param="response_format") from None
        return params.replace(stop=user.stop, json_schema=None, grammar=Grammar.lark(lark))
    except GrammarError as e:
        raise APIError(str(e), param="tools" if tool_fmt else "response_format") from None
    except (TypeError, ValueError) as e:
        raise APIError(str(e), param="stop" if user.stop else "response_format") from None
