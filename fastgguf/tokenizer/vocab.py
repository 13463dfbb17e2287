"""What every tokenizer algorithm shares, read from GGUF ``tokenizer.*`` metadata as llama.cpp reads it
(src/llama-vocab.cpp, llama_vocab::impl::load): the :class:`Vocab` (token texts and ids, scores, token attributes,
special token ids, end-of-generation ids), the metadata readers (a wrong value type is a TokenizerError), and
:class:`Algorithm`, what the Tokenizer asks of each algorithm module (bpe, spm, wpm, ugm).

- Attributes: llama.cpp's llama_token_attr bits (ATTR_*) from tokenizer.ggml.token_type, then llama.cpp's fixes:
  tokens recognised by their text (EOT, EOM, FIM, end of generation) become CONTROL, CONTROL tokens named
  "unused" UNUSED, gpt-oss' <|channel|> ... USER_DEFINED, and LSTRIP/RSTRIP by model name.
- ``eog_ids``: as llama.cpp collects them: EOS, EOT, EOM, FIM pad/repo/sep, and every token whose text is one of
  <|eot_id|>, <|im_end|>, <|end|>, <end_of_turn>, <|endoftext|>, </s>, <|return|>, ... (with llama.cpp's
  exceptions for gpt-oss' <|end|> and Gemma 4's </s>).
"""
import numpy as np

from fastgguf.errors import TokenizerError

# ---------------------------------------------------------------------------------------------------------------
# Token attributes (llama.cpp llama_token_attr) and GGUF token types
# ---------------------------------------------------------------------------------------------------------------

ATTR_UNDEFINED, ATTR_UNKNOWN, ATTR_UNUSED, ATTR_NORMAL = 0, 1 << 0, 1 << 1, 1 << 2
ATTR_CONTROL, ATTR_USER_DEFINED, ATTR_BYTE = 1 << 3, 1 << 4, 1 << 5
ATTR_LSTRIP, ATTR_RSTRIP = 1 << 7, 1 << 8
# GGUF tokenizer.ggml.token_type value -> attribute (0 undefined, 1 normal, 2 unknown, 3 control, 4 user-defined,
# 5 unused, 6 byte; anything else undefined)
_TYPE_TO_ATTR = {1: ATTR_NORMAL, 2: ATTR_UNKNOWN, 3: ATTR_CONTROL, 4: ATTR_USER_DEFINED, 5: ATTR_UNUSED,
                 6: ATTR_BYTE}

SPM_SPACE = "\u2581"                   # "▁": a space in the texts of SentencePiece-style vocabularies

# texts that make a token end generation (llama.cpp llama_vocab::impl::load, "special_eog_ids")
_EOG_TEXTS = frozenset([
    "<|eot_id|>", "<|im_end|>", "<|end|>", "<|return|>", "<|call|>", "<|flush|>", "<|calls|>", "<end_of_turn>",
    "<|endoftext|>", "</s>", "<|eom_id|>", "<EOT>", "_<EOT>", "[EOT]", "[EOS]", "<|end_of_text|>",
    "<end_of_utterance>", "<eos>", "<turn|>", "<|tool_response>", "<｜end▁of▁sentence｜>", "[e~[",
])
_EOT_TEXTS = ("<|eot_id|>", "<|im_end|>", "<|end|>", "<end_of_turn>", "<|endoftext|>", "<|end_of_text|>", "<EOT>",
              "_<EOT>", "[EOT]", "<｜end▁of▁sentence｜>", "<end_of_utterance>")
_FIM_TEXTS = {   # metadata key suffix -> texts that identify the token when the key is absent
    "fim_pre": ("<|fim_prefix|>", "<fim-prefix>", "<fim_prefix>", "<｜fim▁begin｜>", "<PRE>", "▁<PRE>",
                "<|code_prefix|>", "<|prefix|>"),
    "fim_suf": ("<|fim_suffix|>", "<fim-suffix>", "<fim_suffix>", "<｜fim▁hole｜>", "<SUF>", "▁<SUF>",
                "<|code_suffix|>", "<|suffix|>"),
    "fim_mid": ("<|fim_middle|>", "<fim-middle>", "<fim_middle>", "<｜fim▁end｜>", "<MID>", "▁<MID>",
                "<|code_middle|>", "<|middle|>"),
    "fim_pad": ("<|fim_pad|>", "<fim-pad>", "<fim_pad>", "<PAD>", "[PAD]"),
    "fim_rep": ("<|fim_repo|>", "<|repo_name|>", "<fim-repo>", "<REPO>", "<reponame>"),
    "fim_sep": ("<|file_sep|>",),
}

# special id name -> its tokenizer.ggml.<key>_token_id (the last three: older spellings of the FIM keys)
_SPECIAL_KEYS = [("bos", "bos"), ("eos", "eos"), ("eot", "eot"), ("eom", "eom"), ("unk", "unknown"),
                 ("sep", "seperator"), ("pad", "padding"), ("mask", "mask"), ("fim_pre", "fim_pre"),
                 ("fim_suf", "fim_suf"), ("fim_mid", "fim_mid"), ("fim_pad", "fim_pad"), ("fim_rep", "fim_rep"),
                 ("fim_sep", "fim_sep"), ("fim_pre", "prefix"), ("fim_suf", "suffix"), ("fim_mid", "middle")]


# ---------------------------------------------------------------------------------------------------------------
# Metadata readers: a GGUF file may hold any value type under any key
# ---------------------------------------------------------------------------------------------------------------

def md_int(md, key):
    v = md.get(key)
    if v is None or isinstance(v, bool):
        return None
    if not isinstance(v, (int, np.integer)):  # a float id (1.5) is a wrong type too, never truncated
        raise TokenizerError(f"metadata {key} should be an integer, got {short_repr(v)}")
    return int(v)


def short_repr(v, n=80):
    r = repr(v.tolist() if isinstance(v, np.ndarray) else v)
    return r if len(r) <= n else r[:n] + "..."


def md_bool(md, key):
    v = md.get(key)
    if v is None:
        return None
    if isinstance(v, (bool, int)):
        return bool(v)
    raise TokenizerError(f"metadata {key} should be a bool, got {v!r}")


def _token_attrs(token_types, n):
    """tokenizer.ggml.token_type -> list of llama.cpp attribute bits (all NORMAL without the key)."""
    if token_types is None:
        return [ATTR_NORMAL] * n
    if len(token_types) < n:
        raise TokenizerError(f"tokenizer.ggml.token_type has {len(token_types)} entries for {n} tokens")
    lut = np.zeros(8, np.int64)
    for t, a in _TYPE_TO_ATTR.items():
        lut[t] = a
    tt = np.asarray(token_types, np.int64)[:n]
    return np.where((tt >= 0) & (tt < 8), lut[np.clip(tt, 0, 7)], ATTR_UNDEFINED).tolist()


def _special_token_ids(md, n, defaults):
    """Special token ids: the algorithm's defaults (dropped when out of range), then tokenizer.ggml.<key>_token_id.
    (llama.cpp never reads tokenizer.ggml.cls_token_id: a BERT [CLS] is the BOS, 101 unless bos_token_id says.)"""
    special = dict.fromkeys(name for name, _ in _SPECIAL_KEYS)
    special.update(defaults)
    for name, key in _SPECIAL_KEYS:
        if special[name] is not None and special[name] >= n:
            special[name] = None
        v = md_int(md, f"tokenizer.ggml.{key}_token_id")
        if v is not None and 0 <= v < n:
            special[name] = v
    return special


# ---------------------------------------------------------------------------------------------------------------
# Vocab
# ---------------------------------------------------------------------------------------------------------------

class Vocab:
    """The tokens of a GGUF vocabulary. Built in two steps, as llama.cpp does (the algorithms' tables are made
    between them, from the attributes the token types give):

    - ``Vocab(tokens, md, scored)``: ``texts`` (an empty text becomes "[EMPTY_<id>]"), ``ids`` ({text: id}),
      ``n``, ``max_token_chars``, ``scores`` ((n,) floats where ``scored``, else None) and ``attrs`` ((n,) ATTR_*
      bits from tokenizer.ggml.token_type).
    - ``find_specials(md, defaults)``: ``special_ids`` ({"bos", "eos", "eot", "eom", "unk", "sep", "pad", "mask",
      "fim_*"}: id or None), ``eog_ids`` and llama.cpp's attribute fixes.
    """

    def __init__(self, tokens, md, scored):
        n = len(tokens)
        texts = tokens
        if "" in texts:
            texts = [t if t else f"[EMPTY_{i}]" for i, t in enumerate(tokens)]
        self.texts = texts
        self.n = n
        self.max_token_chars = max(map(len, texts), default=0)      # WPM's longest match; max_chars
        self.ids = dict(zip(texts, range(n)))
        if len(self.ids) != n:
            raise TokenizerError("tokenizer.ggml.tokens holds duplicate token texts")
        scores = md.get("tokenizer.ggml.scores")
        if scores is not None:
            if len(scores) < n:
                raise TokenizerError(f"tokenizer.ggml.scores has {len(scores)} entries for {n} tokens")
            scores = np.asarray(scores, np.float32)[:n].tolist() if scored else None
        elif scored:
            scores = [0.0] * n
        self.scores = scores                      # (n,) SPM merge scores / UGM log probabilities, None for BPE/WPM
        self.attrs = _token_attrs(md.get("tokenizer.ggml.token_type"), n)     # (n,) attribute bits

    def find_specials(self, md, defaults):
        """Special token ids (defaults: {name: id} of the algorithm), end-of-generation ids, attribute fixes."""
        self.special_ids = special = _special_token_ids(md, self.n, defaults)
        self._find_eog(special)
        self._per_model_attrs(md)

    @property
    def unk_id(self):
        return self.special_ids["unk"]

    def _find_eog(self, special):
        """End-of-generation ids, and the attribute fixes llama.cpp makes on the way (llama_vocab::impl::load)."""
        texts, attrs, vocab = self.texts, self.attrs, self.ids
        # tokens recognised by their text (llama.cpp: "auto-detect special tokens by text"), in id order
        for name, cands in [("eot", _EOT_TEXTS), ("eom", ("<|eom_id|>",))] + list(_FIM_TEXTS.items()):
            if special[name] is None:
                for t in cands:
                    i = vocab.get(t)
                    if i is not None:
                        special[name] = i
                        attrs[i] |= ATTR_CONTROL
                        break
        for i in np.flatnonzero(np.asarray(attrs) & ATTR_CONTROL).tolist():
            if "unused" in texts[i]:
                attrs[i] |= ATTR_UNUSED

        eog = {special[k] for k in ("fim_pad", "fim_rep", "fim_sep") if special[k] is not None}
        for t in _EOG_TEXTS:
            i = vocab.get(t)
            if i is not None:
                eog.add(i)
                attrs[i] |= ATTR_CONTROL
        for t in ("<|channel|>", "<|message|>", "<|start|>", "<|constrain|>"):     # gpt-oss: always rendered
            i = vocab.get(t)
            if i is not None:
                attrs[i] = ATTR_USER_DEFINED
        for k in ("eos", "eot", "eom"):
            if special[k] is not None:
                eog.add(special[k])
        eog_texts = {texts[i] for i in eog}
        end = vocab.get("<|end|>")
        if end in eog and ("<|call|>" in eog_texts or "<|calls|>" in eog_texts) and (
                "<|return|>" in eog_texts or "<|flush|>" in eog_texts):
            eog.discard(end)                      # harmony / solar-open: <|end|> ends a message, not generation
            attrs[end] = ATTR_USER_DEFINED
        s = vocab.get("</s>")
        if s in eog and ("<|tool_response>" in eog_texts or "<|plamo:eos|>" in eog_texts):
            eog.discard(s)                        # gemma4 / plamo: </s> is a normal token
            attrs[s] = ATTR_NORMAL
        self.eog_ids = frozenset(eog)

    def _per_model_attrs(self, md):
        """llama.cpp "Handle per token attributes": LSTRIP/RSTRIP by model name."""
        attrs, vocab = self.attrs, self.ids
        name = md.get("general.name")
        name = name.lower() if isinstance(name, str) else ""
        arch = md.get("general.architecture")
        arch = arch if isinstance(arch, str) else ""
        pre_name = str(md.get("tokenizer.ggml.pre") or "")
        if any(s in pre_name for s in ("jina-v2-de", "jina-v2-es", "jina-v2-code")) or any(
                s in arch for s in ("nomic-bert-moe", "jina-bert-v3")):
            if "<mask>" in vocab:
                attrs[vocab["<mask>"]] |= ATTR_LSTRIP
        elif "phi-3" in name or "phi3" in name:
            for i in np.flatnonzero(np.asarray(attrs) & (ATTR_CONTROL | ATTR_USER_DEFINED | ATTR_UNKNOWN)).tolist():
                attrs[i] |= ATTR_RSTRIP
            for t, on in (("</s>", True), ("<unk>", False), ("<s>", False), ("<|endoftext|>", False)):
                i = vocab.get(t)
                if i is not None:
                    attrs[i] = attrs[i] | ATTR_RSTRIP if on else attrs[i] & ~ATTR_RSTRIP
        elif "modern-bert" in name and "[MASK]" in vocab:
            attrs[vocab["[MASK]"]] |= ATTR_LSTRIP


# ---------------------------------------------------------------------------------------------------------------
# What the Tokenizer asks of an algorithm module
# ---------------------------------------------------------------------------------------------------------------

# tokenizer.ggml.pre types whose add_sep defaults to true (a separator between two joined texts, as for rerank)
_SEP_PRES = ("jina-v1-en", "jina-v2-code", "roberta-bpe")


def spaced_piece(text):
    """The bytes of a token text with U+2581 written as a space."""
    return text.replace(SPM_SPACE, " ").encode("utf-8", "surrogateescape")


class Algorithm:
    """One tokenizer algorithm: bpe.BPE, spm.SPM, wpm.WPM or ugm.UGM. Made in two steps, as llama.cpp makes it:

    - ``Algorithm(md)`` reads and checks the algorithm's own metadata and sets the defaults below
      (llama_vocab::impl::load).
    - ``build(vocab, cache)`` makes its tables over the tokens (init_tokenizer), before ``vocab.find_specials``;
      ``cache(fn)`` wraps a word -> tuple of ids function in the Tokenizer's bounded word cache.

    Then ``encode(text, space_prefix)`` gives the ids of a text fragment that special-token partitioning left, and
    ``piece(text)`` the bytes of a NORMAL token.
    """

    kind = ""                   # how repr(Tokenizer) names the algorithm
    scored = False              # keeps tokenizer.ggml.scores (Vocab.scores)
    special_defaults = {}       # special token ids unless tokenizer.ggml.<key>_token_id says: {"bos": 1, ...}
    add_bos = add_eos = add_space_prefix = False      # unless tokenizer.ggml.add_bos_token, ... say
    force_bos = False           # BOS added whatever tokenizer.ggml.add_bos_token says
    bounds = None               # (name, name): special ids around every text whatever add_bos/add_eos say (WPM)
    lead_space = False          # puts a space before the first word itself (detokenize drops it)
    normalizes = False          # the text is normalized: characters can be dropped (max_chars has no bound)

    def __init__(self, md):
        self.add_sep = md.get("tokenizer.ggml.pre") in _SEP_PRES      # unless tokenizer.ggml.add_sep_token says

    def build(self, vocab, cache):
        raise NotImplementedError

    def check(self, vocab):
        """Refuse a vocabulary whose special ids (vocab.special_ids, found by now) the algorithm cannot work with."""

    def encode(self, text, space_prefix):
        """Ids (an iterable) of a non-empty text fragment; space_prefix: SentencePiece's space before it."""
        raise NotImplementedError

    def piece(self, text):
        """The bytes a NORMAL token's text stands for (llama_token_to_piece)."""
        return spaced_piece(text)
