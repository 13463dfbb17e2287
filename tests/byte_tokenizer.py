"""A byte-level llguidance tokenizer for grammar tests that need no model: 256 single-byte tokens and an EOS."""
import pytest


class ByteTokenizer:
    """256 single-byte tokens and an EOS token, in the shape llguidance.TokenizerWrapper reads."""
    eos_token_id = 256
    bos_token_id = None
    tokens = [bytes([i]) for i in range(256)] + [b"<eos>"]
    special_token_ids = [256]

    def __call__(self, text):
        return list(text if isinstance(text, bytes) else text.encode())


@pytest.fixture(scope="module")
def byte_tok():
    import llguidance
    return llguidance.LLTokenizer(llguidance.TokenizerWrapper(ByteTokenizer()))


def accepts(tok, lark, text):
    """Whether Lark grammar `lark` accepts `text` fed byte by byte, and may end there."""
    import llguidance
    m = llguidance.LLMatcher(tok, lark, log_level=0)
    assert not m.is_error(), m.get_error()
    for b in text.encode():
        if not m.consume_token(b):
            return False
    return m.is_accepting()
