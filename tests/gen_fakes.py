"""Test doubles for what needs a tokenizer and no weights (chat templates, Sequence's detokenize/stop logic): a
byte-level tokenizer, and a model that is only that tokenizer. Nothing here decodes: generation runs on tiny
random-weight GGUFs (tests/models.py).

FakeTokenizer: ids 0..255 are bytes; specials: 256 <eos> (end of generation), 257 <bos>, 258 <|im_start|>,
259 <|im_end|> (also end of generation)."""
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


class FakeModel:
    """A model's tokenizer and vocabulary size, no weights: what a Sequence and a chat prompt read of a model."""

    def __init__(self, chat_template=None, add_bos=False):
        self.tokenizer = FakeTokenizer(chat_template, add_bos)
        self.n_vocab = N_VOCAB
