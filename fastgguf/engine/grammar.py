r"""Structured output that fails closed: grammars compiled by llguidance, and the per-sequence token mask.

    g = Grammar.json_schema({"type": "object", "properties": {"name": {"type": "string"}}})
    m = Matcher(vocabulary(model), g)         # one per live sequence
    mask = m.fill_mask()                      # uint32 (n_words,): bit i of word i // 32 = token i allowed
    m.consume(token)                          # RuntimeError if the grammar refuses it

A `Grammar` is checked when it is made (no model needed). A JSON schema is first rewritten into an equivalent one
llguidance compiles (fastgguf.engine.schema_rewrite: `oneOf` with disjoint branches, `not`, `if`/`then`/`else`,
`dependencies`, some `uniqueItems`, unknown `format` annotations dropped); what neither can enforce exactly raises
`GrammarError` naming it (`oneOf at #/a: branches 0 and 1 may both match ...`, llguidance's `Unimplemented keys:
["uniqueItems"]`, an unsupported regex, a remote `$ref`, a broken GBNF grammar). Nothing is dropped or approximated
unless `lenient=True` is asked for. llguidance is an optional dependency
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
import importlib
import json
import os
import re
import threading
from collections.abc import Mapping
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass

import numpy as np

from fastgguf.engine.schema_rewrite import rewrite
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
# keywords whose value is a subschema, a list of them, or a dict name -> subschema (where a "format" may hide)
_SUB = ("items", "additionalProperties", "not", "contains", "propertyNames", "additionalItems", "unevaluatedItems",
        "unevaluatedProperties", "if", "then", "else")
_SUB_LIST = ("anyOf", "allOf", "oneOf", "prefixItems", "items")
_SUB_DICT = ("properties", "patternProperties", "$defs", "definitions", "dependentSchemas")


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
    text = text.split("\n   1 | ", 1)[0]
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
    for k in _SUB:
        if isinstance(out.get(k), Mapping):
            out[k] = exact_formats(out[k])
    for k in _SUB_LIST:
        if isinstance(out.get(k), list):
            out[k] = [exact_formats(s) for s in out[k]]
    for k in _SUB_DICT:
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


@dataclass(frozen=True)
class Grammar:
    """A grammar llguidance accepts (`text`: Lark, or llguidance's JSON form), checked on creation. Immutable and
    hashable; equal when (kind, text) are. Make one with the classmethods."""
    kind: str     # one of KINDS: what it was made from
    text: str     # the llguidance grammar string LLMatcher takes

    def __post_init__(self):
        if self.kind not in KINDS:
            raise ValueError(f"Grammar kind must be one of {', '.join(KINDS)}, got {self.kind!r}")
        if not isinstance(self.text, str):
            raise TypeError(f"Grammar text must be a str, got {type(self.text).__name__}")
        err = require_llguidance().LLMatcher.validate_grammar(self.text)
        if err:
            raise GrammarError(f"{self.kind}: {_message(err)}")

    @classmethod
    def json_schema(cls, schema, lenient=False):
        """Output valid under a JSON Schema (a dict, or its JSON text). lenient=True ignores keywords llguidance
        does not implement instead of refusing the schema: the output may then break them."""
        if isinstance(schema, str):
            try:
                schema = json.loads(schema)
            except ValueError as e:
                raise GrammarError(f"json_schema is not valid JSON: {e}") from None
        if not isinstance(schema, Mapping):
            raise TypeError(f"json_schema must be a dict, got {type(schema).__name__}")
        try:
            schema = rewrite(schema, lenient)      # what llguidance cannot compile as it is, rewritten exactly
        except GrammarError as e:
            raise GrammarError(f"json_schema: {e}") from None
        try:
            text = _json_lark(schema, lenient)
        except (TypeError, ValueError) as e:
            raise GrammarError(f"json_schema is not JSON: {e}") from None
        return cls("json_schema", text)

    @classmethod
    def json_object(cls):
        """Any JSON object (OpenAI's response_format {"type": "json_object"})."""
        return cls("json_object", _json_lark({"type": "object"}, False))

    @classmethod
    def gbnf(cls, text):
        """A llama.cpp GBNF grammar (root rule `root`)."""
        if not isinstance(text, str):
            raise TypeError(f"a GBNF grammar must be a str, got {type(text).__name__}")
        require_llguidance()
        convert = importlib.import_module("llguidance.gbnf_to_lark").gbnf_to_lark
        try:
            lark = convert(text)
        except Exception as e:    # noqa: B902 - the converter raises several kinds for a bad grammar
            raise GrammarError(f"gbnf: {e}") from None
        return cls("gbnf", lark)

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
        return cls("regex", require_llguidance().LLMatcher.grammar_from_regex(text))


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
        self.eog_ids = frozenset(eog)
        # llguidance knows one end token; the others are mapped to it (Matcher.consume)
        self.eos_id = tokenizer.eos_id if tokenizer.eos_id in self.eog_ids else eog[0]
        self._eog_bits = [(i >> 5, np.uint32(1 << (i & 31))) for i in eog]     # (word, bit) of each EOG id
        self.lltokenizer = llg.LLTokenizer(_Bridge(tokenizer, tokens, self.eos_id))

    def __repr__(self):
        return f"<Vocabulary n_vocab={self.n_vocab} eog={sorted(self.eog_ids)}>"


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

    def __init__(self, vocab, grammar, _matcher=None):
        if not isinstance(grammar, Grammar):
            raise TypeError(f"grammar must be a Grammar, got {type(grammar).__name__}")
        self.vocab, self.grammar = vocab, grammar
        self._m = _matcher or require_llguidance().LLMatcher(vocab.lltokenizer, grammar.text, log_level=0)
        if self._m.is_error():
            raise GrammarError(f"{grammar.kind}: {_message(self._m.get_error())}")
        self.mask = np.zeros(vocab.n_words, np.uint32)     # (n_words,) bit i % 32 of word i // 32: token i allowed
        self._pending = None    # the next mask, being computed in the background (a Future), see consume()

    def copy(self):
        """An independent matcher at the same position (llguidance's deep copy: no second compile)."""
        if self._pending is not None:
            self.fill_mask()            # never copy while the background mask computation uses the matcher
        return Matcher(self.vocab, self.grammar, self._m.deep_copy())

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
        if not mask.any():
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


def matchers(model, grammar, n):
    """n fresh Matchers of grammar over model's vocabulary (one per choice of a request): compiled once, copied.
    Built where a request is prepared (the caller's thread, a server's worker thread), never on the engine thread."""
    first = Matcher(vocabulary(model), grammar)
    return [first] + [first.copy() for _ in range(n - 1)]
