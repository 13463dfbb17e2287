"""SamplingParams: the one owner of sampling and stopping defaults and of their validation.

`generate`, `chat`, the Sampler, the command line (its flags are generated from the fields below) and the server
all take one of these; nothing else writes a default down.

    params = SamplingParams(temperature=0, max_tokens=32)
    model.generate("Hello", params=params)
    model.generate("Hello", temperature=0, max_tokens=32)        # the same: keywords build SamplingParams
    model.generate("Hello", params=params, seed=3)               # keywords override fields of params

Order of the samplers (as llama.cpp): logit bias, repetition penalty (last `repeat_last_n` accepted tokens, prompt
included; positive logits divided, negative multiplied), frequency/presence penalties (OpenAI: over accepted
*generated* tokens), then greedy when `temperature <= 0`, else top-k (0: off) -> top-p (1: off) -> min-p (0: off),
measured at temperature 1, and a draw from the softmax at `temperature`. Same seed and inputs -> same tokens.

Structured output (needs llguidance: `pip install 'fastgguf[structured]'`): `json_schema` (a dict) or `grammar`
(GBNF text, or a fastgguf.engine.grammar.Grammar), not both, is compiled when the params are made: a schema or
grammar that cannot be enforced exactly raises GrammarError (a ValueError) here, before any token is generated.
`constraint()` returns the compiled Grammar. A constraint refuses `stop` strings: one could cut a value short.
"""
import dataclasses
import json
import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Optional, Tuple, Union

import numpy as np

from fastgguf.engine.grammar import Grammar, GrammarError
from fastgguf.engine.stops import MAX_STOP_CHARS, MAX_STOPS, stop_matcher

__all__ = ["SamplingParams", "is_draft_model", "check_logit_bias", "check_stop", "check_token_id", "check_token_ids",
           "MAX_TOKEN_ID",
           "MAX_TOKENS_LIMIT"]

MAX_TOKEN_ID = (1 << 24) - 1     # without a vocabulary size, the largest token id accepted
MAX_TOKENS_LIMIT = (1 << 31) - 1  # max_tokens above this is an error at the call, not an overflow later


def _real(name, value, lo=None, hi=None, lo_open=False):
    if isinstance(value, bool) or not isinstance(value, (int, float, np.integer, np.floating)):
        raise TypeError(f"{name} must be a number, got {type(value).__name__}")
    v = float(value)
    if not math.isfinite(v):
        raise ValueError(f"{name} must be finite, got {value!r}")
    if lo is not None and (v < lo or (lo_open and v == lo)):
        raise ValueError(f"{name} must be {'>' if lo_open else '>='} {lo}, got {value!r}")
    if hi is not None and v > hi:
        raise ValueError(f"{name} must be <= {hi}, got {value!r}")
    return v


def _int(name, value, lo=None, hi=None):
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)):
        raise TypeError(f"{name} must be an int, got {type(value).__name__}")
    v = int(value)
    if lo is not None and v < lo:
        raise ValueError(f"{name} must be >= {lo}, got {v}")
    if hi is not None and v > hi:
        raise ValueError(f"{name} must be <= {hi}, got {v}")
    return v


def check_token_id(name, value, n_vocab=None):
    """A token id (int, or a decimal string as OpenAI JSON keys are) in [0, n_vocab)."""
    if isinstance(value, str):
        try:
            value = int(value)
        except ValueError:
            raise ValueError(f"{name}: token id {value!r} is not an integer") from None
    v = _int(name, value, 0)
    if n_vocab is not None and v >= n_vocab:
        raise ValueError(f"{name}: token id {v} is out of range for a vocabulary of {n_vocab}")
    if n_vocab is None and v > MAX_TOKEN_ID:  # the sampler keeps per-id counters: bound them
        raise ValueError(f"{name}: token id {v} is too large (> {MAX_TOKEN_ID}; give the Sampler n_vocab)")
    return v


def check_token_ids(ids, n_vocab, name="ids"):
    """A non-empty sequence of token ids in [0, n_vocab) -> int32 array. The one check for token-id input (prompts,
    Context.eval): floats, strings, bools and mappings are refused, never truncated or parsed."""
    if isinstance(ids, (str, bytes, bytearray, Mapping, set, frozenset)) or not hasattr(ids, "__len__"):
        raise TypeError(f"{name} must be a sequence of int token ids, got {type(ids).__name__}")
    if isinstance(ids, np.ndarray):
        if ids.ndim != 1:
            raise ValueError(f"{name} must be a 1-D sequence of token ids, got shape {ids.shape}")
        if ids.dtype.kind not in "iu":
            raise ValueError(f"{name}: token ids must be integers, got {ids.dtype}")
        arr = ids
    else:
        for t in ids:
            if isinstance(t, bool) or not isinstance(t, (int, np.integer)):
                raise ValueError(f"{name}: token ids must be integers, got {type(t).__name__} {t!r:.20}")
        vals = [int(t) for t in ids]
        # range-checked as Python ints: an id past int64 (2**70) is out of range too, not an OverflowError
        bad = next((t for t in vals if not 0 <= t < n_vocab), None)
        if bad is not None:
            raise ValueError(f"{name}: token id {bad} is out of range for a vocabulary of {n_vocab}")
        arr = np.array(vals, dtype=np.int32)
    if arr.size == 0:
        raise ValueError(f"{name} is empty: give at least one token id")
    lo, hi = int(arr.min()), int(arr.max())
    if lo < 0 or hi >= n_vocab:
        raise ValueError(f"{name}: token id {lo if lo < 0 else hi} is out of range for a vocabulary of {n_vocab}")
    return arr.astype(np.int32)


def check_logit_bias(logit_bias, n_vocab=None):
    """Validate {token id: bias} (ids may be int or decimal strings; bias finite or -inf to ban); returns a dict."""
    if logit_bias is None:
        return {}
    if not isinstance(logit_bias, Mapping):
        raise TypeError(f"logit_bias must be a dict {{token_id: bias}}, got {type(logit_bias).__name__}")
    out = {}
    for k, b in logit_bias.items():
        tid = check_token_id("logit_bias", k, n_vocab)
        if isinstance(b, bool) or not isinstance(b, (int, float, np.integer, np.floating)):
            raise TypeError(f"logit_bias[{k!r}] must be a number, got {type(b).__name__}")
        b = float(b)
        if math.isnan(b) or b == math.inf:
            raise ValueError(f"logit_bias[{k!r}] must be finite or -inf (to ban the token), got {b}")
        out[tid] = out.get(tid, 0.0) + b
    return out


def check_stop(stop):
    """A stop string or a list of them -> a tuple of the non-empty strings: at most MAX_STOPS of them, each at most
    MAX_STOP_CHARS characters (fastgguf.engine.stops: the limits bound what matching them costs)."""
    if stop is None:
        return ()
    if isinstance(stop, str):
        stop = [stop]
    try:
        stops = list(stop)
    except TypeError:
        raise TypeError(f"stop must be a string or a list of strings, got {type(stop).__name__}") from None
    for s in stops:
        if not isinstance(s, str):
            raise TypeError(f"stop must be a string or a list of strings, got an item of type {type(s).__name__}")
        if len(s) > MAX_STOP_CHARS:
            raise ValueError(f"stop: a stop string has {len(s)} characters; at most {MAX_STOP_CHARS} are allowed")
    if len(stops) > MAX_STOPS:
        raise ValueError(f"stop: {len(stops)} stop strings given; at most {MAX_STOPS} are allowed")
    return tuple(s for s in stops if s)


SPECULATIVE_MODES = ("prompt_lookup",)  # besides a draft Model; "none" (and None) mean off


def is_draft_model(x):
    """A fastgguf Model given as `speculative` (duck-typed: the engine's Model is above this module)."""
    return not isinstance(x, str) and all(hasattr(x, a) for a in ("context", "tokenizer", "n_vocab", "metadata"))


def _speculative(value):
    if value is None or is_draft_model(value):
        return value
    if not isinstance(value, str):
        raise TypeError(f"speculative must be None, 'none', 'prompt_lookup' or a draft Model, got "
                        f"{type(value).__name__}")
    if value == "none":
        return None
    if value not in SPECULATIVE_MODES:
        raise ValueError(f"speculative must be 'none', 'prompt_lookup' or a draft Model, got {value!r}")
    return value


def _opt(flags, help, metavar=None):
    """Field metadata: the command-line flags and help text (fastgguf.cli.common generates the flags from it)."""
    return {"flags": flags, "help": help, "metavar": metavar}


@dataclass(frozen=True)
class SamplingParams:
    """How to choose tokens and when to stop. Immutable; validated on creation (TypeError / ValueError naming the
    field). `replace(**changes)` returns a validated copy."""
    max_tokens: Optional[int] = field(default=256, metadata=_opt(
        ("-n", "--max-tokens"), "tokens to generate; None: until end-of-generation or a full context"))
    temperature: float = field(default=0.8, metadata=_opt(("--temp", "--temperature"), "temperature, 0 = greedy"))
    top_k: int = field(default=40, metadata=_opt(("--top-k",), "top-k, 0 = off"))
    top_p: float = field(default=0.95, metadata=_opt(("--top-p",), "top-p (nucleus), 1 = off"))
    min_p: float = field(default=0.05, metadata=_opt(("--min-p",), "min-p, 0 = off"))
    repeat_penalty: float = field(default=1.0, metadata=_opt(("--repeat-penalty",), "repetition penalty, 1 = off"))
    repeat_last_n: int = field(default=64, metadata=_opt(
        ("--repeat-last-n",), "tokens the repetition penalty looks at (-1: all)"))
    frequency_penalty: float = field(default=0.0, metadata=_opt(("--frequency-penalty",), "OpenAI frequency penalty"))
    presence_penalty: float = field(default=0.0, metadata=_opt(("--presence-penalty",), "OpenAI presence penalty"))
    logit_bias: Optional[Mapping] = field(default=None, metadata=_opt(
        ("--logit-bias",), "add BIAS to token ID's logit (repeatable; -inf bans it)", metavar="ID=BIAS"))
    seed: Optional[int] = field(default=None, metadata=_opt(("--seed",), "random seed (None: random)"))
    stop: Tuple[str, ...] = field(default=(), metadata=_opt(
        ("--stop",), "stop string, never emitted (repeatable)", metavar="TEXT"))
    json_schema: Optional[Mapping] = field(default=None, metadata=_opt(
        ("--json-schema",), "output valid under this JSON Schema (a file or JSON text)", metavar="SCHEMA"))
    grammar: Optional[Union[str, Grammar]] = field(default=None, metadata=_opt(
        ("--grammar",), "output matching this GBNF grammar (a file)", metavar="FILE"))
    # exact speculative decoding (fastgguf.engine.speculative): the same output, fewer forward passes when the
    # drafts are right; a draft Model is given with --draft-model FILE on the command line
    speculative: Optional[object] = field(default=None, metadata=_opt(
        ("--speculative",), "speculative decoding: none or prompt_lookup (or --draft-model FILE)", metavar="MODE"))
    draft_max: int = field(default=8, metadata=_opt(("--draft-max",), "tokens drafted per step (1..64)"))
    draft_ngram_max: int = field(default=3, metadata=_opt(
        ("--draft-ngram-max",), "prompt lookup: longest n-gram looked up (tried first)"))
    draft_ngram_min: int = field(default=1, metadata=_opt(("--draft-ngram-min",), "prompt lookup: shortest n-gram"))

    def __post_init__(self):
        set_ = object.__setattr__
        if self.max_tokens is not None:
            set_(self, "max_tokens", _int("max_tokens", self.max_tokens, 0, MAX_TOKENS_LIMIT))
        set_(self, "temperature", _real("temperature", self.temperature, 0.0))
        set_(self, "top_k", min(_int("top_k", self.top_k, 0), 0x7FFFFFFF))
        set_(self, "top_p", _real("top_p", self.top_p, 0.0, 1.0, lo_open=True))
        set_(self, "min_p", _real("min_p", self.min_p, 0.0, 1.0))
        set_(self, "repeat_penalty", _real("repeat_penalty", self.repeat_penalty, 0.0, lo_open=True))
        set_(self, "repeat_last_n", min(_int("repeat_last_n", self.repeat_last_n, -1), 0x7FFFFFFF))
        set_(self, "frequency_penalty", _real("frequency_penalty", self.frequency_penalty))
        set_(self, "presence_penalty", _real("presence_penalty", self.presence_penalty))
        if self.logit_bias is not None:
            set_(self, "logit_bias", check_logit_bias(self.logit_bias) or None)
        if self.seed is not None:
            if isinstance(self.seed, bool) or not isinstance(self.seed, (int, np.integer)):
                raise TypeError(f"seed must be an int or None, got {type(self.seed).__name__}")
            set_(self, "seed", int(self.seed))
        set_(self, "stop", check_stop(self.stop))
        set_(self, "speculative", _speculative(self.speculative))
        set_(self, "draft_max", _int("draft_max", self.draft_max, 1, 64))
        set_(self, "draft_ngram_max", _int("draft_ngram_max", self.draft_ngram_max, 1, 64))
        set_(self, "draft_ngram_min", _int("draft_ngram_min", self.draft_ngram_min, 1, self.draft_ngram_max))
        set_(self, "_stops", stop_matcher(self.stop))  # built where the request is made, not on the engine thread
        set_(self, "_constraint", self._compile_constraint())

    def _compile_constraint(self):
        """The Grammar that json_schema / grammar ask for (None: unconstrained); stores both canonically."""
        schema, grammar = self.json_schema, self.grammar
        if schema is None and grammar is None:
            return None
        if schema is not None and grammar is not None:
            raise ValueError("json_schema and grammar: give one constraint, not both")
        if self.stop:
            raise ValueError("stop strings cannot be combined with json_schema / grammar: a stop string could cut "
                             "a value")
        if schema is not None:
            if not isinstance(schema, Mapping):
                raise TypeError(f"json_schema must be a dict, got {type(schema).__name__}")
            try:      # a private copy: the caller's dict may change after the schema is compiled
                schema = json.loads(json.dumps(schema, allow_nan=False))
            except (TypeError, ValueError) as e:
                raise ValueError(f"json_schema is not JSON: {e}") from None
            object.__setattr__(self, "json_schema", schema)
            return Grammar.json_schema(schema)
        if isinstance(grammar, str):
            try:
                grammar = Grammar.gbnf(grammar)
            except GrammarError as e:
                raise GrammarError(f"grammar: {e}") from None
            object.__setattr__(self, "grammar", grammar)
        elif not isinstance(grammar, Grammar):
            raise TypeError(f"grammar must be GBNF text or a Grammar, got {type(grammar).__name__}")
        return grammar

    def constraint(self):
        """The Grammar the output must match, or None."""
        return self._constraint

    def stop_matcher(self):
        """The stop strings' automaton (fastgguf.engine.stops.StopMatcher), built with the params."""
        return self._stops

    def _key(self):
        """The fields as hashable values: logit_bias as sorted items, json_schema as its JSON text (its property
        order is part of the grammar)."""
        out = []
        for f in dataclasses.fields(self):
            v = getattr(self, f.name)
            if f.name == "json_schema" and v is not None:
                v = json.dumps(v)
            elif isinstance(v, dict):
                v = tuple(sorted(v.items()))
            out.append(v)
        return tuple(out)

    def __eq__(self, other):
        return type(other) is type(self) and self._key() == other._key()

    def __hash__(self):
        return hash(self._key())

    def replace(self, **changes):
        return dataclasses.replace(self, **changes)

    @property
    def greedy(self):
        return self.temperature <= 0.0

    @classmethod
    def names(cls):
        return tuple(f.name for f in dataclasses.fields(cls))

    @classmethod
    def from_args(cls, params=None, **kwargs):
        """`params` (a SamplingParams, a dict of fields, or None) with keyword overrides; an unknown keyword is a
        TypeError naming it."""
        unknown = sorted(set(kwargs) - set(cls.names()))
        if unknown:
            raise TypeError(f"unknown sampling parameter(s): {', '.join(unknown)} "
                            f"(known: {', '.join(cls.names())})")
        if params is None:
            return cls(**kwargs)
        if isinstance(params, Mapping):
            return cls.from_args(None, **{**params, **kwargs})
        if not isinstance(params, cls):
            raise TypeError(f"params must be a SamplingParams, got {type(params).__name__}")
        return params.replace(**kwargs) if kwargs else params
