r"""Structured output that fails closed: grammars compiled by llguidance, and the per-sequence token mask.

    g = Grammar.json_schema({"type": "object", "properties": {"name": {"type": "string"}}})
    m = Matcher(vocabulary(model), g)         # one per live sequence
    mask = m.fill_mask()                      # uint32 (n_words,): bit i of word i // 32 = token i allowed
    m.consume(token)                          # RuntimeError if the grammar refuses it

A `Grammar` is checked when it is made (no model needed), in steps: the static limits of grammar_limits (size,
depth through $ref, GBNF rules and repetitions, a grammar that can produce nothing); a JSON schema rewritten into an
equivalent one llguidance compiles (fastgguf.engine.schema_rewrite: `oneOf` with disjoint branches, `not`,
`if`/`then`/`else`, `dependencies`, `uniqueItems` of a small finite set, unknown `format` annotations dropped; any
other `uniqueItems` marked for the Matcher to enforce as the output is written: engine.unique_items); then llguidance's
compile. Those run in the sandbox's worker process (engine/sandbox.py: a CPU budget, a memory limit, a small stack;
cancellable), cached by the source's hash (compile_source). The in-process compile over a model's vocabulary
(Vocabulary.compiled) runs after that, in a thread with a 16x larger stack, once per grammar. What cannot be
enforced exactly raises `GrammarError` naming it (`oneOf at #/a: branches 0 and 1 may both match ...`,
llguidance's `Unimplemented keys: ["contains"]`, an unsupported regex, a remote `$ref`, a broken GBNF grammar,
a limit). Nothing is dropped or approximated unless `lenient=True` is asked for. llguidance is an optional dependency
(`pip install 'fastgguf[structured]'`), imported on first use.

The vocabulary bridge (`vocabulary(model)`, as llama.cpp's common/llguidance.cpp): token i is the bytes of its piece;
a token whose piece is empty but which renders as text with specials (control tokens such as <|im_end|>) is
b"\xff" + that text, llguidance's marker for special tokens, so a grammar never produces one as text. The
tokenize callback is `Tokenizer.tokenize_raw` (no BOS, no SentencePiece space prefix: the ids' bytes are exactly
the text). Ids past the tokenizer's count (a logits row wider than the vocabulary) are empty and never allowed.
End of generation: every EOG id of the tokenizer is allowed exactly where the grammar may end, never elsewhere.

Departures from JSON Schema (llguidance's, kept; the output is still valid under the schema):
- object properties come in the schema's `properties` order;
- numbers under `minimum`/`maximum` bounds are written without exponent notation;
- between the tokens of a value: nothing, one space, or 1-2 newlines and up to 20 spaces/tabs (`JSON_WHITESPACE`),
  so a model cannot spin in whitespace until max_tokens; 0 to 2 spaces/newlines may come before the value
  (`JSON_LEAD`), none after;
- strings may use any JSON escape but `\/`; `enum` / `const` strings are written as themselves, never as \u escapes;
- `format: date` gets an exact pattern beside it (`DATE`): llguidance's own allows Feb 29 of every year and year 0000,
  which no validator accepts (Python's datetime.date, jsonschema's format checker);
- an "x-guidance" key in a schema is replaced by these options.
"""
import collections
import hashlib
import importlib
import json
import os
import re
import threading
import time
from collections.abc import Mapping
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass

import numpy as np

from fastgguf.engine import sandbox
from fastgguf.engine.grammar_limits import MAX_SCHEMA_BYTES, SUB, SUB_DICT, SUB_LIST, check_schema, check_text, \
    gbnf_to_lark
from fastgguf.engine.schema_rewrite import rewrite
from fastgguf.engine.unique_items import REPEAT, TokenBytes, UniqueItems
from fastgguf.errors import GrammarError

__all__ = ["Grammar", "GrammarError", "Matcher", "Vocabulary", "vocabulary", "matchers", "require_llguidance",
           "available", "json_options", "exact_formats", "DATE",
           "JSON_WHITESPACE", "JSON_LEAD"]

# between the tokens of a JSON value: nothing, a space, or 1-2 newlines and an indent of up to 20 (llama.cpp's
# json-schema-to-grammar SPACE_RULE): enough for pretty-printing, never an endless run
JSON_WHITESPACE = r"(?:\x20|\x0A{1,2}[\x20\x09]{0,20})?"
JSON_LEAD = r"[\x20\x0A]{1,2}"          # optional, before the value
KINDS = ("json_schema", "json_object", "gbnf", "lark", "regex")
# an RFC 3339 full-date that exists: years 0001-9999, days per month, Feb 29 of leap years only
_YEAR = r"(?:[0-9]{3}[1-9]|[0-9]{2}[1-9][0-9]|[0-9][1-9][0-9]{2}|[1-9][0-9]{3})"
_LEAP = r"(?:[0-9]{2}(?:0[48]|[2468][048]|[13579][26])|(?:0[48]|[2468][048]|[13579][26])00)"
DATE = (rf"^(?:{_YEAR}-(?:(?:0[13578]|1[02])-(?:0[1-9]|[12][0-9]|3[01])|(?:0[469]|11)-(?:0[1-9]|[12][0-9]|30)"
        rf"|02-(?:0[1-9]|1[0-9]|2[0-8]))|{_LEAP}-02-29)$")


def available():
    """Whether llguidance (the `structured` extra) is installed."""
    try:
        require_llguidance()
    except ImportError:
        return False
    return True


def require_llguidance():
    """The llguidance module, or ImportError naming the extra that installs it."""
    try:
        return importlib.import_module("llguidance")
    except ImportError as e:
        raise ImportError("structured output needs llguidance: pip install 'fastgguf[structured]'") from e


def _message(text):
    """llguidance's error without its location prefix and its listing of the grammar source."""
    text = text.split("\n   1 | ", 1)[0].split("<backtrace>", 1)[0].split("\n<state>", 1)[0].replace("<non-verbose/>", "")
    text = re.sub(r"^at \d+\(\d+\): ", "", text)
    return text.replace("failed to compile JSON schema: ", "", 1).strip()


def json_options(lenient=False):
    """llguidance's "x-guidance" options of every %json fastgguf writes (our whitespace rules, see the module
    docstring): a schema's grammar and the tool-call grammars (engine.tools) alike."""
    return {"whitespace_flexible": True, "whitespace_pattern": JSON_WHITESPACE, "coerce_one_of": False,
            "json_allow_general_unicode_escapes": True, "lenient": bool(lenient)}


def exact_formats(schema):
    """A copy of schema whose `format: date` subschemas carry DATE as a pattern too (see the module docstring)."""
    if not isinstance(schema, Mapping):
        return schema
    out = dict(schema)
    for k in SUB:
        if isinstance(out.get(k), Mapping):
            out[k] = exact_formats(out[k])
    for k in SUB_LIST:
        if isinstance(out.get(k), list):
            out[k] = [exact_formats(s) for s in out[k]]
    for k in SUB_DICT:
        if isinstance(out.get(k), Mapping):
            out[k] = {name: exact_formats(s) for name, s in out[k].items()}
    if out.get("format") == "date":
        return dict(out, pattern=DATE) if "pattern" not in out else {"allOf": [out, {"pattern": DATE}]}
    return out


def _json_lark(schema, lenient):
    """Lark text: the schema as llguidance's %json, with our whitespace rules (see the module docstring)."""
    body = json.dumps({**exact_formats(schema), "x-guidance": json_options(lenient)}, ensure_ascii=False,
                      allow_nan=False)
    return f"start: json_value | JSON_LEAD json_value\nJSON_LEAD: /{JSON_LEAD}/\njson_value: %json {body}\n"


def limits():
    """llguidance's parser limits for every compile and matcher: its defaults, without the parser state and grammar
    source in error messages (a request's error must not carry them)."""
    return require_llguidance().LLParserLimits(verbose_errors=False)


def build(kind, source, lenient=False):
    """Lark text that llguidance accepts, from a json_schema (its JSON text), gbnf, lark or regex source, after the
    limits of grammar_limits; GrammarError otherwise. Runs in the compile sandbox (see compile_source): besides
    validating, it compiles the grammar over a byte vocabulary, takes its first mask and one step, the work a
    model's matcher repeats in the server, and refuses a grammar whose compile takes over MATCHER_CPU_SECONDS."""
    llg = require_llguidance()
    if kind == "json_schema":
        schema = json.loads(source)
        check_schema(schema)
        try:
            schema = rewrite(schema, lenient, defer_unique=True,   # what llguidance cannot compile, rewritten
                             narrowed=None if lenient else [])      # (or, strict, narrowed: a oneOf's overlap)
        except GrammarError as e:
            raise GrammarError(f"json_schema: {e}") from None
        check_schema(schema)                       # a rewrite may grow it (complements, listed unique arrays)
        text = _json_lark(schema, lenient)
    elif kind == "gbnf":
        text = gbnf_to_lark(source)
    else:
        check_text(kind, source)
        text = llg.LLMatcher.grammar_from_regex(source) if kind == "regex" else source
    err = llg.LLMatcher.validate_grammar(text, limits=limits())
    if err:
        raise GrammarError(f"{kind}: {_message(err)}")
    t = time.thread_time()        # this thread's CPU (in-process mode shares the process with decode threads)
    m = llg.LLMatcher(_byte_tokenizer(text), text, log_level=0, limits=limits())
    if not m.is_error():
        first = np.flatnonzero(np.unpackbits(np.frombuffer(m.compute_bitmask(), np.uint8), bitorder="little"))
        if len(first) and first[0] < 256:
            m.consume_token(int(first[0]))      # the first step's forced tokens: where a long repetition fails
    if m.is_error():
        raise GrammarError(f"{kind}: {_message(m.get_error())}")
    spent = time.thread_time() - t
    if spent > MATCHER_CPU_SECONDS:
        raise GrammarError(f"{kind}: compiling it takes {spent:.1f} CPU-s, over the budget of "
                           f"{MATCHER_CPU_SECONDS:g} s")
    return text


MATCHER_CPU_SECONDS = 2.0   # a grammar's compile over a byte vocabulary, in the sandbox; the server repeats it


class _Bytes:
    """A vocabulary of the 256 bytes, an end token and n - 257 empty tokens (so a grammar may name token ids up to
    n - 1, as tool grammars name a model's special tokens: <[id]>): the sandbox's stand-in for a model's."""
    is_tokenizer_wrapper = True
    special_token_ids = ()
    eos_token_id = 256
    bos_token_id = None

    def __init__(self, n):
        self.tokens = [bytes([i]) for i in range(256)] + [b"\xff<eos>"] + [b""] * (n - 257)

    def __call__(self, text):
        return list(text.encode("utf-8"))


_BYTE_TOKENIZERS = {}
_TOKEN_IDS = re.compile(r"<\[([0-9][0-9,\s-]*)\]>")


def _byte_tokenizer(text=""):
    """The byte vocabulary, as wide as the largest token id text names (a power of two, at most 2^21)."""
    ids = [int(x) for group in _TOKEN_IDS.findall(text) for x in re.findall(r"[0-9]+", group)]
    n = 512
    while ids and n <= max(ids) and n < (1 << 21):
        n *= 2
    if n not in _BYTE_TOKENIZERS:
        _BYTE_TOKENIZERS[n] = require_llguidance().LLTokenizer(_Bytes(n))
    return _BYTE_TOKENIZERS[n]


_CACHE = collections.OrderedDict()      # sha256 of (kind, lenient, source) -> Lark text, or the GrammarError's text
_CACHE_BYTES = [0]
_CACHE_LIMIT = 64 << 20                 # bytes of cached sources and results
_CACHE_LOCK = threading.Lock()


def _key(kind, source, lenient):
    return hashlib.sha256(f"{kind}\0{int(bool(lenient))}\0".encode() + source.encode("utf-8", "surrogatepass"))\
        .digest()


def _remember(key, value):
    with _CACHE_LOCK:
        if key not in _CACHE:
            _CACHE[key] = value
            _CACHE_BYTES[0] += len(value)
        _CACHE.move_to_end(key)
        while _CACHE_BYTES[0] > _CACHE_LIMIT and len(_CACHE) > 1:
            _, old = _CACHE.popitem(last=False)
            _CACHE_BYTES[0] -= len(old)


def compile_source(kind, source, lenient=False):
    """build(kind, source) in the compile sandbox (a worker process under a CPU, memory and stack limit:
    fastgguf.engine.sandbox), cached by the source's hash: the same schema or grammar is compiled once, and a
    refused one refused again at no cost. The Lark text, or GrammarError."""
    require_llguidance()        # ImportError naming the extra, even where the cache knows the answer
    key = _key(kind, source, lenient)
    with _CACHE_LOCK:
        hit = _CACHE.get(key)
        if hit is not None:
            _CACHE.move_to_end(key)
    if hit is None:
        try:
            hit = sandbox.run("fastgguf.engine.grammar:build", [kind, source, bool(lenient)])
        except sandbox.SandboxError as e:
            raise GrammarError(f"{kind}: {e}") from None     # not cached: a loaded machine may pass next time
        except GrammarError as e:
            hit = "\0" + str(e)
        _remember(key, hit)
        if not hit.startswith("\0"):
            _remember(_key("lark", hit, False), hit)          # Grammar(kind, text) checks this text: known good
    if hit.startswith("\0"):
        raise GrammarError(hit[1:])
    return hit


@dataclass(frozen=True)
class Grammar:
    """A grammar llguidance accepts (`text`: Lark, or llguidance's JSON form), checked on creation (in the compile
    sandbox, cached: compile_source). Immutable and hashable; equal when (kind, text) are. Make one with the
    classmethods."""
    kind: str     # one of KINDS: what it was made from
    text: str     # the llguidance grammar string LLMatcher takes

    def __post_init__(self):
        if self.kind not in KINDS:
            raise ValueError(f"Grammar kind must be one of {', '.join(KINDS)}, got {self.kind!r}")
        if not isinstance(self.text, str):
            raise TypeError(f"Grammar text must be a str, got {type(self.text).__name__}")
        try:
            compile_source("lark", self.text)
        except GrammarError as e:
            raise GrammarError(f"{self.kind}: {str(e).removeprefix('lark: ')}") from None

    @classmethod
    def json_schema(cls, schema, lenient=False):
        """Output valid under a JSON Schema (a dict, or its JSON text). lenient=True ignores keywords llguidance
        does not implement instead of refusing the schema: the output may then break them."""
        if isinstance(schema, str):
            if len(schema) > MAX_SCHEMA_BYTES:
                raise GrammarError(f"json_schema: the schema is over the limit of {MAX_SCHEMA_BYTES} bytes")
            try:
                schema = json.loads(schema)
            except (ValueError, RecursionError) as e:
                raise GrammarError(f"json_schema is not valid JSON: {e}") from None
        if not isinstance(schema, Mapping):
            raise TypeError(f"json_schema must be a dict, got {type(schema).__name__}")
        try:
            source = json.dumps(schema, ensure_ascii=False, allow_nan=False)
        except (TypeError, ValueError, RecursionError) as e:
            raise GrammarError(f"json_schema is not JSON: {e}") from None
        if len(source) > MAX_SCHEMA_BYTES:
            raise GrammarError(f"json_schema: the schema is {len(source)} characters, over the limit of "
                               f"{MAX_SCHEMA_BYTES} bytes")
        return cls("json_schema", compile_source("json_schema", source, lenient))

    @classmethod
    def json_object(cls):
        """Any JSON object (OpenAI's response_format {"type": "json_object"})."""
        return cls.json_schema({"type": "object"})

    @classmethod
    def gbnf(cls, text):
        """A llama.cpp GBNF grammar (root rule `root`)."""
        if not isinstance(text, str):
            raise TypeError(f"a GBNF grammar must be a str, got {type(text).__name__}")
        check_text("gbnf", text)
        return cls("gbnf", compile_source("gbnf", text))

    @classmethod
    def lark(cls, text):
        """A grammar in llguidance's Lark dialect (rule `start`; %json, %regex, special tokens <|...|>)."""
        if not isinstance(text, str):
            raise TypeError(f"a Lark grammar must be a str, got {type(text).__name__}")
        return cls("lark", text)

    @classmethod
    def regex(cls, text):
        """Output matching a regular expression as a whole (Rust regex syntax; no look-around)."""
        if not isinstance(text, str):
            raise TypeError(f"a regex must be a str, got {type(text).__name__}")
        check_text("regex", text)
        return cls("regex", compile_source("regex", text))


class _Bridge:
    """What llguidance's LLTokenizer reads from a Python tokenizer (llguidance.TokenizerWrapper's fields)."""
    is_tokenizer_wrapper = True
    special_token_ids = ()       # specials are marked in `tokens` already

    def __init__(self, tokenizer, tokens, eos_id):
        self.tokens = tokens     # (n_vocab,) bytes of each id
        self.eos_token_id = eos_id
        self.bos_token_id = tokenizer.bos_id
        self._tokenize = tokenizer.tokenize_raw

    def __call__(self, text):
        return self._tokenize(text)      # str only: TypeError on bytes


class Vocabulary:
    """A tokenizer as llguidance sees it (built once per model: `vocabulary(model)`)."""

    def __init__(self, tokenizer, n_vocab=None):
        llg = require_llguidance()
        n_tok = tokenizer.n_vocab
        n_vocab = n_tok if n_vocab is None else int(n_vocab)
        if n_vocab < n_tok:
            raise ValueError(f"n_vocab {n_vocab} is smaller than the tokenizer's {n_tok} tokens")
        piece = tokenizer.token_to_piece
        tokens = [piece(i) for i in range(n_tok)]
        for i, p in enumerate(tokens):
            if not p:
                special = piece(i, special=True)
                if special:
                    tokens[i] = b"\xff" + special
        tokens += [b""] * (n_vocab - n_tok)
        eog = sorted(tokenizer.eog_ids)
        if not eog:
            raise GrammarError("the vocabulary has no end-of-generation token: constrained output could never end")
        self.n_vocab = n_vocab
        self.n_words = (n_vocab + 31) // 32
        self.tokens = tokens          # (n_vocab,) bytes of each id, specials b"\xff"-marked
        self._token_bytes = None      # TokenBytes, built on first use by a grammar with unique items
        self.eog_ids = frozenset(eog)
        # llguidance knows one end token; the others are mapped to it (Matcher.consume)
        self.eos_id = tokenizer.eos_id if tokenizer.eos_id in self.eog_ids else eog[0]
        self._eog_bits = [(i >> 5, np.uint32(1 << (i & 31))) for i in eog]     # (word, bit) of each EOG id
        self.lltokenizer = llg.LLTokenizer(_Bridge(tokenizer, tokens, self.eos_id))
        self._protos = collections.OrderedDict()      # Grammar.text -> compiled LLMatcher at its start
        self._lock = threading.Lock()

    def __repr__(self):
        return f"<Vocabulary n_vocab={self.n_vocab} eog={sorted(self.eog_ids)}>"

    def token_bytes(self):
        """The pieces as unique_items reads them (built once, on first use)."""
        with self._lock:
            if self._token_bytes is None:
                self._token_bytes = TokenBytes(self.tokens)
            return self._token_bytes

    def compiled(self, grammar):
        """The LLMatcher of grammar over this vocabulary at its start (copy it: deep_copy), compiled once and kept
        (PROTOTYPES, least recently used first out). Compiled in a thread of sandbox.BIG_STACK, after the grammar's
        text passed the sandbox (a Grammar is checked when made); GrammarError if its first mask fails or allows
        nothing but the end, i.e. the grammar cannot produce any text."""
        with self._lock:
            m = self._protos.get(grammar.text)
            if m is not None:
                self._protos.move_to_end(grammar.text)
                return m
        m = sandbox.big_stack(self._compile, grammar)
        with self._lock:
            self._protos[grammar.text] = m
            while len(self._protos) > PROTOTYPES:
                self._protos.popitem(last=False)
        return m

    def _compile(self, grammar):
        m = require_llguidance().LLMatcher(self.lltokenizer, grammar.text, log_level=0, limits=limits())
        first = m if m.is_error() else m.deep_copy()
        if not first.is_error():
            mask = np.zeros(self.n_words, np.uint32)
            first.unsafe_compute_mask_ptr(mask.ctypes.data, mask.nbytes)
            if not first.is_error() and not mask.any():
                raise GrammarError(f"{grammar.kind}: no token of the vocabulary can start the output")
        if first.is_error():
            raise GrammarError(f"{grammar.kind}: {_message(first.get_error())}")
        return m


PROTOTYPES = 32     # compiled grammars kept per Vocabulary (each holds its lexer states: MBs for a big one)


_VOCAB_LOCK = threading.Lock()


def vocabulary(model):
    """The Vocabulary of a Model (anything with .tokenizer and .n_vocab), built once and kept on it."""
    v = getattr(model, "_grammar_vocabulary", None)
    if v is None:
        with _VOCAB_LOCK:
            v = getattr(model, "_grammar_vocabulary", None)
            if v is None:
                v = Vocabulary(model.tokenizer, model.n_vocab)
                model._grammar_vocabulary = v
    return v


_WORKER = [None, None]     # (pid, executor): the threads computing masks in the background (none survive a fork)
_WORKER_LOCK = threading.Lock()


def _mask_worker():
    with _WORKER_LOCK:
        if _WORKER[0] != os.getpid():
            _WORKER[:] = os.getpid(), ThreadPoolExecutor(max_workers=2, thread_name_prefix="fastgguf-mask")
        return _WORKER[1]


class Matcher:
    """One live sequence's position in a grammar. Per token: fill_mask(), sample within it, consume()."""

    def __init__(self, vocab, grammar, _matcher=None, _unique=None):
        if not isinstance(grammar, Grammar):
            raise TypeError(f"grammar must be a Grammar, got {type(grammar).__name__}")
        self.vocab, self.grammar = vocab, grammar
        self._m = _matcher or vocab.compiled(grammar).deep_copy()
        self._unique = _unique if _matcher else UniqueItems.of(grammar)   # uniqueItems the grammar leaves to us
        self.mask = np.zeros(vocab.n_words, np.uint32)     # (n_words,) bit i % 32 of word i // 32: token i allowed
        self._pending = None    # the next mask, being computed in the background (a Future), see consume()

    def copy(self):
        """An independent matcher at the same position (llguidance's deep copy: no second compile)."""
        if self._pending is not None:
            self.fill_mask()            # never copy while the background mask computation uses the matcher
        unique = self._unique.copy() if self._unique is not None else None
        return Matcher(self.vocab, self.grammar, self._m.deep_copy(), unique)

    def fill_mask(self):
        """Fill self.mask with the tokens allowed next and return it. RuntimeError if none is. When consume()
        started computing it in the background, this waits for that."""
        pending, self._pending = self._pending, None
        if pending is not None:
            pending.result()            # re-raises the background computation's error
        else:
            self._compute()
        return self.mask

    def _compute(self):
        m, mask = self._m, self.mask
        m.unsafe_compute_mask_ptr(mask.ctypes.data, mask.nbytes)
        if m.is_error():
            raise RuntimeError(f"grammar matcher failed: {m.get_error()}")
        ends = m.is_accepting()
        for word, bit in self.vocab._eog_bits:
            if ends:
                mask[word] |= bit
            else:
                mask[word] &= ~bit
        if self._unique is not None:
            _restrict(m, self._unique, mask, self.vocab, LOOKAHEAD)
        if not mask.any():
            if self._unique is not None and self._unique.n_unique:
                raise RuntimeError("no token of the vocabulary can continue the output here without repeating an "
                                   "item of an array whose items must be distinct (uniqueItems)")
            raise RuntimeError("no token of the vocabulary can continue the grammar here")

    def consume(self, token):
        """Advance past token. RuntimeError (naming the grammar's complaint) if the grammar refuses it. Then the
        next mask is computed in the background, while the caller runs the model's forward pass on the token (C,
        GIL released): the mask's cost hides behind the forward pass where a core is free for it."""
        if self._pending is not None:   # a mask nobody asked for (consume twice in a row): let it finish first
            self.fill_mask()
        token = int(token)
        if not 0 <= token < self.vocab.n_vocab:
            raise RuntimeError(f"token {token} is out of range for a vocabulary of {self.vocab.n_vocab}")
        if token in self.vocab.eog_ids:
            if not self._m.is_accepting():
                raise RuntimeError(f"end-of-generation token {token} refused: the grammar cannot end here")
            self._consume(self.vocab.eos_id)
            return                      # the sequence ends: no next mask
        if self._unique is not None and not self._unique.feed(self.vocab.tokens[token]):
            raise RuntimeError(f"grammar refused token {token}: {REPEAT}")
        self._consume(token)
        if not self._m.is_stopped():
            self._pending = _mask_worker().submit(self._compute)

    def _consume(self, token):
        if not self._m.consume_token(token):
            raise RuntimeError(f"grammar refused token {token}: {self._m.get_error()}")

    def accepting(self):
        """The grammar may end here (end-of-generation tokens are allowed)."""
        return self._m.is_accepting()

    def stopped(self):
        """Nothing but end of generation can follow."""
        return self._m.is_stopped()


# a uniqueItems string item's risky tokens are followed this deep (the first and 3 after it); items of a finite set
# of strings need none: unique_items keeps them on the values not written yet
LOOKAHEAD = 4


def _allowed(mask, t):
    return bool(mask[t >> 5] >> np.uint32(t & 31) & np.uint32(1))


def _restrict(m, unique, mask, vocab, depth):
    """Clear in mask (the grammar's, at llguidance matcher m) the tokens that complete a repeated item, and, depth
    tokens deep, those after which nothing but repeats is left (unique.risky: a string item made equal to an earlier
    one, whose end the grammar may force)."""
    tokens = vocab.token_bytes()
    unique.forbid(mask, tokens)
    if depth:
        for t in unique.risky(tokens):
            if _allowed(mask, t) and _leads_nowhere(m, unique, t, vocab, depth - 1):
                mask[t >> 5] &= ~np.uint32(1 << (t & 31))


def _leads_nowhere(m, unique, t, vocab, depth):
    """Whether, after token t, the grammar leaves nothing but items repeating earlier ones (_restrict's mask of the
    next step, looking depth tokens further, is empty)."""
    m2, u2 = m.deep_copy(), unique.copy()
    if not m2.consume_token(int(t)) or not u2.feed(vocab.tokens[t]):
        return False                      # refused anyway: not this function's to judge
    mask = np.zeros(vocab.n_words, np.uint32)
    m2.unsafe_compute_mask_ptr(mask.ctypes.data, mask.nbytes)
    if m2.is_error():
        return False
    _restrict(m2, u2, mask, vocab, depth)
    return not mask.any()


def matchers(model, grammar, n):
    """n fresh Matchers of grammar over model's vocabulary (one per choice of a request): copies of its compiled
    prototype (Vocabulary.compiled: a grammar sent again is not compiled again).
    Built where a request is prepared (the caller's thread, a server's worker thread), never on the engine thread."""
    vocab = vocabulary(model)
    return [Matcher(vocab, grammar) for _ in range(n)]
