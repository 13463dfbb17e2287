"""gemma4 (fastgguf/arch/gemma4.py) on tiny random files (tests/models.py GEMMA4: sliding layers 0-2 and 4 with their
own head size and KV heads, full layers 3 and 5 with rope_freqs, layers 4-5 reusing layers 2-3's K/V with a doubled
FFN, per-layer inputs, no attn_v in layer 1): the float64 oracle past the sliding ring's wrap on both paths, cached
decode == recompute, batched == alone, rewind / prefix copy / saved state, the Scheduler's n = 2, Gemma 4's chat
template, and what a file may not say. Its logits against llama.cpp (both paths, F32 and Q8_0) are in
test_tiny_references.py."""
import jinja2
import numpy as np
import pytest

import models
from fastgguf.engine import state as fstate
from fastgguf.engine.chat import render_template
from fastgguf.engine.model import Model
from fastgguf.errors import GGUFError
from test_batch import check_same, decode_schedules
from test_state import check_continues, via_file

# the tiny files say context_length 128; the ring test runs 300 positions
pytestmark = pytest.mark.filterwarnings("ignore:n_ctx=.*exceeds the model's training context:RuntimeWarning")
IDS = [5, 17, 99, 0, 42, 42, 7, 63, 1, 2, 88, 31, 4]


@pytest.fixture(scope="module")
def path(tmp_path_factory):
    return models.build(tmp_path_factory.mktemp("g4") / "t.gguf", "gemma4", vocab="no_vocab", seed=11)


@pytest.fixture(scope="module")
def model(path):
    return Model(path, n_threads=2)


def test_hparams_and_cache(model):
    """Layer kinds, dims, K/V sources and FFN widths as the file says; the K/V-sharing layers hold no cache."""
    hp = model.hparams
    assert hp.swa_layers == (0, 1, 2, 4) and hp.n_swa == 4 and hp.attn_scale == 1.0 and hp.v_norm
    assert (hp.head_dim, hp.n_head_kv, hp.n_rot) == (32, 1, 32) and hp.layer_dims(0) == (16, 2, 16)
    assert [hp.kv_source(i) for i in range(6)] == [0, 1, 2, 3, 2, 3]
    assert hp.ff_layers == (96, 96, 96, 96, 192, 192) and hp.n_embd_per_layer == 32
    n_ctx = 64   # K and V, F16: three sliding layers of 2 x 16 and one full layer of 1 x 32 values per position
    assert model.weights.cache_bytes(n_ctx)[0] == 2 * 2 * n_ctx * (3 * 32 + 32)


def test_past_the_ring_matches_oracle(path, model):
    """300 positions with a window of 4: the sliding layers' ring (4 + 256 rows) wraps, and the sharing layers read
    it; the prompt in chunks, then decode steps; and decoding from the start (the one-row path)."""
    from oracle import Oracle
    ids = [int(t) for t in np.random.default_rng(3).integers(0, 100, 300)]
    want = Oracle(path).forward(ids, kv_f16=True)
    ctx = model.context(400)
    got = ctx.eval(ids[:280], all_logits=True)
    steps = [ctx.runner.step_py(t) for t in ids[280:]]
    # A K/V value the cache rounds to F16 may land on the other side of a rounding tie from the oracle's (float32
    # sums in another order: the scalar ISA at position ~195 here), and with a window of 4 keys it moves the next
    # rows' logits by up to 7e-3 (the SIMD ISAs: 1e-3 at most). So: every logit within 1e-2, typical ones within 1e-4.
    dec = model.context(400)
    for seq in (np.concatenate([got, steps]), [dec.runner.step_py(t) for t in ids]):
        np.testing.assert_allclose(seq, want, atol=1e-2, rtol=1e-3)
        assert np.median(np.abs(np.asarray(seq) - want)) < 1e-4


def test_moe_layout_matches_oracle(tmp_path):
    """The MoE layout (test_tiny_references' GEMMA4_MOE: 4 experts of 32, 2 used, beside the dense FFN; gate|up fused
    in layer 1) past the ring on both paths; batched rows == each alone."""
    from oracle import Oracle
    from test_tiny_references import GEMMA4_MOE
    p = models.build(tmp_path / "moe.gguf", "gemma4", vocab="no_vocab", seed=11, gemma4=GEMMA4_MOE)
    m = Model(p, n_threads=2)
    assert m.hparams.moe_dense and m.hparams.n_ff_exp == 32 and m.weights.c_hparams["n_ff"] == 96
    ids = [int(t) for t in np.random.default_rng(5).integers(0, 100, 270)]
    want = Oracle(p).forward(ids, kv_f16=True)
    ctx = m.context(300)
    got = ctx.eval(ids[:260], all_logits=True)
    steps = [ctx.runner.step_py(t) for t in ids[260:]]
    np.testing.assert_allclose(np.concatenate([got, steps]), want, atol=3e-3, rtol=1e-3)
    check_same(m, decode_schedules(np.random.default_rng(1), 100, [1, 9, 20], 4), [32, 32, 64], 2)


def test_both_paths_and_cached_decode_equal_recompute(model):
    batch, one = models.both_paths(model, IDS)
    np.testing.assert_array_equal(batch, one)
    ctx = model.context(64)
    ctx.eval(IDS[:6])
    steps = [ctx.runner.step_py(t) for t in IDS[6:]]
    np.testing.assert_array_equal(steps, batch[6:])


@pytest.mark.filterwarnings("ignore:n_threads=3 is more than:RuntimeWarning")
def test_threads_do_not_change_the_logits(path, model):
    """The per-layer inputs and the K/V-sharing layers split across 1 or 3 threads: bit for bit the same."""
    one = Model(path, n_threads=1)
    want = one.context(64).eval(IDS, all_logits=True)
    three = Model(path, n_threads=3)
    np.testing.assert_array_equal(three.context(64).eval(IDS, all_logits=True), want)
    ctx = three.context(64)
    np.testing.assert_array_equal([ctx.runner.step_py(t) for t in IDS], want)


def test_batched_rows_equal_each_alone(model):
    check_same(model, decode_schedules(np.random.default_rng(0), 100, [1, 7, 20], 5), [32, 32, 64], 2)


def test_rewind_copy_prefix_and_saved_state(model, tmp_path):
    ids = [int(t) for t in np.random.default_rng(4).integers(0, 100, 40)]
    ctx = model.context(64)
    full = ctx.eval(ids, all_logits=True)
    ctx.rewind(30)
    np.testing.assert_array_equal(ctx.eval(ids[30:], all_logits=True), full[30:])
    other = model.context(64)
    other.copy_prefix(ctx, 25)
    np.testing.assert_array_equal(other.eval(ids[25:], all_logits=True), full[25:])
    check_continues(model, ids, via_file(tmp_path, 128), n_ctx=64)
    # the first 2 of a saved state's 4 positions (its layout: per layer of its own K/V, that layer's dims)
    short = model.context(64)
    short.eval(ids[:4])
    short.save_state(tmp_path / "s4")
    part = model.context(64)
    fstate.load(part, str(tmp_path / "s4"), n=2)   # as the prompt cache loads a stored prefix
    np.testing.assert_array_equal(part.eval(ids[2:10], all_logits=True), full[2:10])


def test_scheduler_n2_equals_plain(tmp_path):
    """An n = 2 request (the second choice copies the first's prefix: the K/V-sharing layers have none of their own)
    and a later one on the same slots: plain generate()'s text."""
    m = Model(models.build(tmp_path / "v.gguf", "gemma4", vocab="llama-bpe", wtype="Q8_0"), n_threads=2)
    prompt, params = "one two three four one two three four one two", dict(temperature=0, max_tokens=8)
    ids = list(m.tokenize(prompt))
    ref = m.generate(prompt, **params)
    first, again, _ = models.scheduler_n2_then_1(m, ids, params, 64)
    assert first == [ref.text, ref.text] and again == ref.text


TEMPLATE = "google-gemma-4-31B-it"
CHAT = [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Hi there"},
        {"role": "assistant", "content": "Hello!"}, {"role": "user", "content": "Weather?"}]
TOOLS = [{"type": "function", "function": {"name": "get_weather", "description": "Get weather", "parameters": {
    "type": "object", "properties": {"city": {"type": "string", "description": "City"}}, "required": ["city"]}}}]
CALL = CHAT + [{"role": "assistant", "content": "", "tool_calls": [
    {"id": "c1", "type": "function", "function": {"name": "get_weather", "arguments": {"city": "Paris"}}}]},
    {"role": "tool", "tool_call_id": "c1", "content": "sunny"}]


@pytest.mark.parametrize("messages, extra", [(CHAT, {}), (CHAT, {"enable_thinking": True}),
                                             (CALL, {"tools": TOOLS})])
def test_chat_template(messages, extra):
    """Gemma 4's template (as its GGUF's tokenizer.chat_template) renders in the sandbox as in plain Jinja with
    transformers' settings; the plain chat turn is the documented format."""
    source = models._template(TEMPLATE)
    got = render_template(source, messages, bos_token="<bos>", **extra)
    env = jinja2.Environment(trim_blocks=True, lstrip_blocks=True, extensions=["jinja2.ext.loopcontrols"])
    want = env.from_string(source).render(messages=messages, add_generation_prompt=True, bos_token="<bos>",
                                          eos_token="", **extra)
    assert got == want
    if not extra:
        assert got == ("<bos><|turn>system\nBe brief.<turn|>\n<|turn>user\nHi there<turn|>\n<|turn>model\nHello!"
                       "<turn|>\n<|turn>user\nWeather?<turn|>\n<|turn>model\n<|channel>thought\n<channel|>")


@pytest.mark.parametrize("meta, match", [
    ({"attention.shared_kv_layers": 3}, "shared_kv_layers"),          # layer 2 (sliding) would be a full one's source
    ({"attention.shared_kv_layers": 6}, "shared_kv_layers"),
    ({"attention.sliding_window_pattern": [True] * 5}, "sliding_window_pattern"),
    ({"attention.head_count_kv": [2, 2, 1, 1, 2, 1]}, "head_count_kv"),  # sliding layers' counts differ
    ({"attention.key_length_swa": 24}, "value_length_swa"),
    ({"expert_count": 4, "expert_used_count": 2}, "missing tensor"),     # experts said, none there
])
def test_bad_keys_are_named(tmp_path, meta, match):
    with pytest.raises(GGUFError, match=match):
        Model(models.build(tmp_path / "b.gguf", "gemma4", vocab="no_vocab", meta=meta))


def test_missing_rope_freqs_is_named(tmp_path, path):
    from fastgguf import GGUFFile, GGUFWriter
    from fastgguf.gguf.quantize import copy_metadata
    with GGUFFile(path) as f:
        w = GGUFWriter(alignment=f.alignment)
        copy_metadata(f, w)
        for name, ti in f.tensors.items():
            if name != "rope_freqs.weight":
                w.add_tensor(name, f.tensor(name), ggml_type=ti.type, shape=tuple(ti.shape))
        w.write(str(tmp_path / "n.gguf"))
    with pytest.raises(GGUFError, match="rope_freqs"):
        Model(str(tmp_path / "n.gguf"))


def test_chat_prompt_tokens(tmp_path):
    """With Gemma 4's own vocabulary the rendered prompt's markers are single special tokens, and <turn|> (the end of
    a model turn) ends generation."""
    from fastgguf.tokenizer import Tokenizer
    from vocab_files import unpack_vocab
    tok = Tokenizer(unpack_vocab("gemma-4", tmp_path / "v.gguf"))
    text = render_template(models._template(TEMPLATE), CHAT, bos_token="<bos>")
    ids = tok.tokenize(text, add_special=False, parse_special=True)
    for marker in ("<bos>", "<|turn>", "<turn|>", "<|channel>", "<channel|>"):
        one = tok.tokenize(marker, add_special=False, parse_special=True)
        assert len(one) == 1 and one[0] in ids, marker
    end, = tok.tokenize("<turn|>", add_special=False, parse_special=True)
    assert tok.is_eog(end)
