"""fastgguf.gguf.quantize / `fastgguf quantize`: a tiny model built here, quantized, read back with gguf-py."""
import os
import re

import numpy as np
import pytest
from gguf import GGMLQuantizationType as GT
from gguf import GGUFReader
from gguf import quants as gq

from fastgguf import kernels
from fastgguf.cli import main
from fastgguf.gguf import GGMLType, GGUFFile, GGUFValueType, GGUFWriter
from fastgguf.gguf.quantize import QuantizeError, quantize_file, quantized_variant, target_type

RNG = np.random.default_rng(1)
F32 = {  # the float content of every tensor of the tiny model, by name
    "token_embd.weight": RNG.standard_normal((40, 64)).astype(np.float32),
    "blk.0.attn_norm.weight": RNG.standard_normal(64).astype(np.float32),
    "blk.0.attn_q.weight": RNG.standard_normal((64, 64)).astype(np.float32),
    "blk.0.ffn_up.weight": RNG.standard_normal((96, 64)).astype(np.float16).astype(np.float32),
    "blk.0.ffn_gate.weight": RNG.standard_normal((96, 64)).astype(np.float32),
    "blk.0.ffn_down.weight": RNG.standard_normal((64, 96)).astype(np.float32),
    "blk.0.odd.weight": RNG.standard_normal((8, 40)).astype(np.float32),  # rows not a multiple of 32
    "output.weight": RNG.standard_normal((40, 64)).astype(np.float32),
}
SOURCE_TYPES = {"blk.0.ffn_up.weight": GGMLType.F16, "blk.0.ffn_gate.weight": GGMLType.BF16,
                "blk.0.ffn_down.weight": GGMLType.Q4_1}


@pytest.fixture(scope="module")
def tiny_model(tmp_path_factory):
    path = str(tmp_path_factory.mktemp("q") / "tiny.F32.gguf")
    w = GGUFWriter()
    w.add_string("general.architecture", "llama")
    w.add_uint32("general.file_type", 0)
    w.add_uint32("llama.block_count", 1)
    w.add_float32("llama.rope.freq_base", 10000.0)
    w.add_bool("llama.flag", True)
    w.add_array("tokenizer.ggml.tokens", ["a", "b", "\u00e9"])
    w.add_array("tokenizer.ggml.scores", np.arange(3, dtype=np.float32))
    w.add_array("tokenizer.ggml.token_type", np.array([1, 1, 3], dtype=np.int32))
    for name, x in F32.items():
        t = SOURCE_TYPES.get(name, GGMLType.F32)
        if t == GGMLType.F32:
            w.add_tensor(name, x)
        elif t == GGMLType.F16:
            w.add_tensor(name, x.astype(np.float16))
        else:
            w.add_tensor(name, kernels.quantize(x, int(t)), ggml_type=t, shape=x.shape)
    w.write(path)
    return path


def _source_floats(name):
    """What the quantizer sees: the stored tensor, dequantized."""
    x, t = F32[name], SOURCE_TYPES.get(name, GGMLType.F32)
    if t in (GGMLType.F32, GGMLType.F16):
        return x
    return kernels.dequantize(kernels.quantize(x, int(t)), int(t), x.shape[-1])


def _read(path):
    r = GGUFReader(path)
    return r, {t.name: t for t in r.tensors}


@pytest.mark.parametrize("qtype", ["q4_0", "q4_1", "q8_0"])
@pytest.mark.parametrize("pure", [False, True])
def test_quantize_tiny_model(tiny_model, tmp_path, qtype, pure):
    out = str(tmp_path / "out.gguf")
    plan = quantize_file(tiny_model, out, qtype, pure=pure, n_threads=2)
    r, tensors = _read(out)
    want_main = GT[qtype.upper()]
    expect = {
        "token_embd.weight": want_main if pure else GT.Q8_0,
        "output.weight": want_main if pure else GT.Q8_0,
        "blk.0.attn_norm.weight": GT.F32,
        "blk.0.odd.weight": GT.F16,
    }
    assert list(tensors) == list(F32)  # same tensors, same order
    for name, x in F32.items():
        t = tensors[name]
        want_t = expect.get(name, want_main)
        assert t.tensor_type == want_t, name
        assert plan[name] == int(want_t)
        assert tuple(int(d) for d in reversed(t.shape)) == x.shape, name
        src = _source_floats(name)
        if want_t == GT.F32:
            assert np.array_equal(np.asarray(t.data).reshape(x.shape), src), name
        elif SOURCE_TYPES.get(name) == GGMLType.Q4_1 and want_t == GT.Q4_1:
            # already in the target type: copied byte for byte
            assert np.array_equal(np.asarray(t.data).reshape(-1), kernels.quantize(x, "Q4_1").reshape(-1)), name
        else:  # bit-identical to gguf-py's own quantization of the same floats
            want = np.ascontiguousarray(gq.quantize(src, want_t)).view(np.uint8).reshape(-1)
            assert np.array_equal(np.asarray(t.data).view(np.uint8).reshape(-1), want), name
    fields = r.fields
    assert int(fields["general.file_type"].parts[-1][0]) == {"q4_0": 2, "q4_1": 3, "q8_0": 7}[qtype]
    assert int(fields["general.quantization_version"].parts[-1][0]) == 2
    with GGUFFile(out) as f, GGUFFile(tiny_model) as src:
        for key, v in src.metadata.items():
            if key == "general.file_type":
                continue
            assert f.value_type(key) == src.value_type(key), key
            got = f.metadata[key]
            assert np.array_equal(got, v) if isinstance(v, np.ndarray) else got == v, key


def test_threads_do_not_change_the_file(tiny_model, tmp_path):
    a, b = str(tmp_path / "a.gguf"), str(tmp_path / "b.gguf")
    quantize_file(tiny_model, a, "q4_0", n_threads=1)
    quantize_file(tiny_model, b, "q4_0", n_threads=3)
    assert open(a, "rb").read() == open(b, "rb").read()


def test_target_type_policy():
    assert target_type("blk.3.attn_norm.weight", (576,), GGMLType.Q4_0) == GGMLType.F32
    assert target_type("blk.3.attn_q.weight", (576, 576), GGMLType.Q4_0) == GGMLType.Q4_0
    assert target_type("token_embd.weight", (49152, 576), GGMLType.Q4_0) == GGMLType.Q8_0
    assert target_type("token_embd.weight", (49152, 576), GGMLType.Q4_0, pure=True) == GGMLType.Q4_0
    assert target_type("blk.0.x.weight", (8, 40), GGMLType.Q8_0) == GGMLType.F16
    assert target_type("rope_freqs", (32, 32), GGMLType.Q8_0) == GGMLType.F32  # not a weight


def test_cli(tiny_model, tmp_path, capsys):
    out = str(tmp_path / "cli.gguf")
    assert main(["quantize", tiny_model, out, "--type", "Q8_0", "--quiet", "--threads", "2"]) == 0
    assert "wrote" in capsys.readouterr().out
    _, tensors = _read(out)
    assert tensors["blk.0.attn_q.weight"].tensor_type == GT.Q8_0
    with pytest.raises(SystemExit):
        main(["quantize", tiny_model, out, "--type", "q5_k"])
    assert main(["quantize", tiny_model, tiny_model, "--type", "q8_0"]) == 2


def test_unreadable_input_type(tmp_path):
    path = str(tmp_path / "k.gguf")
    w = GGUFWriter()
    w.add_string("general.architecture", "llama")
    w.add_tensor("blk.0.attn_q.weight", np.zeros((1, 66), np.uint8), ggml_type=GGMLType.IQ2_XXS, shape=(1, 256))
    w.write(path)
    with pytest.raises(QuantizeError, match="IQ2_XXS"):
        quantize_file(path, str(tmp_path / "o.gguf"), "q4_0")
    with pytest.raises(QuantizeError, match="unknown quantization type"):
        quantize_file(path, str(tmp_path / "o.gguf"), "q3_0")


def test_quantized_variant_made_once(tiny_model, tmp_path):
    p = quantized_variant(tiny_model, "q8_0", tmp_path)
    assert os.path.basename(p) == "tiny.Q8_0.gguf"
    mtime = os.stat(p).st_mtime_ns
    assert quantized_variant(tiny_model, "Q8_0", tmp_path) == p
    assert os.stat(p).st_mtime_ns == mtime
    assert [f for f in os.listdir(tmp_path) if f.endswith(".part")] == []
    _, tensors = _read(p)
    assert tensors["blk.0.attn_q.weight"].tensor_type == GT.Q8_0


def _model_with(path, name, row, col, value):
    """An all-F32 copy of the tiny model with one weight replaced."""
    w = GGUFWriter()
    w.add_string("general.architecture", "llama")
    w.add_uint32("llama.block_count", 1)
    for n, x in F32.items():
        x = x.copy()
        if n == name:
            x.reshape(-1, x.shape[-1])[row, col] = value
        w.add_tensor(n, x)
    w.write(str(path))
    return str(path)


@pytest.mark.parametrize("qtype, value", [("q4_0", 6e5), ("q8_0", 1e7), ("q5_1", 4e6), ("q3_k_m", 1e7),
                                          ("q4_k_m", 1e9), ("q6_k", 1e9), ("iq4_nl", 1e7)])
def test_weights_too_large_for_the_format_are_refused(tmp_path, qtype, value):
    """0.2 wrote inf block scales (one weight of 6e5 overflows a Q4_0 block's fp16 scale); llama-quantize refuses
    such rows ('quantized data validation failed'). Named: the tensor, row, block and weight; nothing written.
    (Rows of 64: the k-quant recipes fall back to 32-blocks here; the check dequantizes whatever was written.)"""
    src, out = _model_with(tmp_path / "big.gguf", "blk.0.attn_q.weight", 3, 40, value), tmp_path / "o.gguf"
    with pytest.raises(QuantizeError, match=rf"'blk\.0\.attn_q\.weight': row 3, block 1 .*{re.escape(f'{value:g}')}"):
        quantize_file(src, str(out), qtype, pure=True)
    assert not out.exists()


@pytest.mark.parametrize("value", [np.nan, np.inf, -np.inf])
@pytest.mark.parametrize("name", ["blk.0.attn_q.weight", "blk.0.attn_norm.weight"])
def test_nan_and_inf_source_weights_are_refused(tmp_path, value, name):
    """0.2 quantized them silently (into NaN or inf scales, or finite garbage); a copied norm kept them."""
    src = _model_with(tmp_path / "nan.gguf", name, 0, 7, value)
    with pytest.raises(QuantizeError, match=rf"{name}.*row 0, column 7 is -?(nan|inf)"):
        quantize_file(src, str(tmp_path / "o.gguf"), "q4_0")


def test_cli_refusals(tiny_model, tmp_path, capsys):
    """The output's directory is checked before the work (0.2 said so only after quantizing everything), and a
    refused weight is a one-line error with exit code 1."""
    src = _model_with(tmp_path / "nan.gguf", "blk.0.attn_q.weight", 0, 0, np.nan)
    assert main(["quantize", src, str(tmp_path / "no" / "such" / "o.gguf"), "--type", "q4_0", "--quiet"]) == 1
    assert "directory does not exist" in capsys.readouterr().err  # before the NaN weight is met
    assert main(["quantize", src, str(tmp_path / "o.gguf"), "--type", "q4_0", "--quiet"]) == 1
    err = capsys.readouterr().err
    assert "blk.0.attn_q.weight" in err and "Traceback" not in err
