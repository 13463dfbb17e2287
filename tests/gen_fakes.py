"""Test doubles for generation logic (no real model): a byte-level tokenizer and scripted/bigram models.

FakeTokenizer: ids 0..255 are bytes; specials: 256 <eos> (end of generation), 257 <bos>, 258 <|im_start|>,
259 <|im_end|> (also end of generation). FakeModel's contexts produce logits that make greedy decoding say `script`
(a str, as bytes) after any prompt, then <eos>; with `table` (n_vocab, n_vocab) the logits are table[last token]."""
import numpy as np

EOS, BOS, IM_START, IM_END = 256, 257, 258, 259
SPECIALS = {EOS: "<eos>", BOS: "<bos>", IM_START: "<|im_start|>", IM_END: "<|im_end|>"}
N_VOCAB = 260


class FakeStreamingDecoder:
    def __init__(self, tok):
        self.tok = tok
        self.buf = b""

    def feed(self, tid):
        self.buf += self.tok.token_to_piece(tid)
        # longest prefix that is complete UTF-8
        for cut in range(len(self.buf), max(len(self.buf) - 4, -1), -1):
            try:
                text = self.buf[:cut].decode("utf-8")
            except UnicodeDecodeError:
                continue
            self.buf = self.buf[cut:]
            return text
        text = self.buf.decode("utf-8", "replace")
        self.buf = b""
        return text

    def flush(self):
        text = self.buf.decode("utf-8", "replace")
        self.buf = b""
        return text


class FakeTokenizer:
    n_vocab = N_VOCAB
    bos_id = BOS
    eos_id = EOS
    eog_ids = {EOS, IM_END}

    def __init__(self, chat_template=None, add_bos=False):
        self.chat_template = chat_template
        self.add_bos = add_bos

    def is_eog(self, tid):
        return tid in self.eog_ids

    def token_to_piece(self, tid):
        if tid in SPECIALS:
            return SPECIALS[tid].encode()
        return bytes([tid])

    def tokenize(self, text, add_special=True, parse_special=False):
        ids = [BOS] if (add_special and self.add_bos) else []
        i = 0
        while i < len(text):
            if parse_special:
                for sid, s in SPECIALS.items():
                    if text.startswith(s, i):
                        ids.append(sid)
                        i += len(s)
                        break
                else:
                    ids.extend(text[i].encode())
                    i += 1
            else:
                ids.extend(text[i].encode())
                i += 1
        return ids

    def detokenize(self, ids):
        return b"".join(self.token_to_piece(t) for t in ids).decode("utf-8", "replace")

    def streaming_decoder(self):
        return FakeStreamingDecoder(self)


class FakeContext:
    def __init__(self, model, n_ctx):
        self.model = model
        self.n_ctx = n_ctx
        self.runner = None
        self.tokens = []
        self.start = None   # n_past after the first eval since reset: where the script starts
        self.evals = []     # every eval call's ids

    @property
    def n_past(self):
        return len(self.tokens)

    def reset(self):
        self.tokens = []
        self.start = None

    def rewind(self, n):
        assert 0 <= n <= len(self.tokens)
        self.tokens = self.tokens[:n]
        self.start = None

    def eval(self, ids, all_logits=False):
        ids = list(ids)
        assert ids and len(self.tokens) + len(ids) <= self.n_ctx
        self.evals.append(ids)
        self.tokens += ids
        if self.start is None or len(ids) > 1:  # a prompt (re)starts the script
            self.start = len(self.tokens)
        return self.model.logits(self.tokens, self.start)


class FakeModel:
    def __init__(self, script="", table=None, n_ctx_train=512, chat_template=None, add_bos=False):
        self.script = list(script.encode()) + [EOS] if isinstance(script, str) else list(script)
        self.table = None if table is None else np.asarray(table, dtype=np.float32)
        self.tokenizer = FakeTokenizer(chat_template, add_bos)
        self.n_vocab = N_VOCAB
        self.n_ctx_train = n_ctx_train
        self.contexts = []

    def context(self, n_ctx=4096):
        c = FakeContext(self, n_ctx)
        self.contexts.append(c)
        return c

    def logits(self, tokens, start):
        if self.table is not None:
            return self.table[tokens[-1]].copy()
        i = len(tokens) - start
        target = self.script[i] if i < len(self.script) else EOS
        out = np.zeros(N_VOCAB, dtype=np.float32)
        out[target] = 20.0
        return out
