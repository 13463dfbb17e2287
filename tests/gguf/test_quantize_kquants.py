"""The llama.cpp recipes of fastgguf.gguf.quantize (q4_k_m ... iq4_nl, mxfp4_moe): byte-identical, tensor by tensor, to
llama-quantize's output for the same input. tests/data/quantize-hashes.json holds llama-quantize's per-tensor types
and sha256 (tools/gen_quantize_hashes.py), so no llama.cpp is needed here.

Sources: the random model of tests/models.py's "kq" preset (every dimension a multiple of 256, F16/F32 weights) for
every recipe, and the default model (SmolLM2-135M Q4_1: requantized, 576-wide rows that take the fallbacks, tied
embeddings): its type plan for every recipe, its bytes for q4_k_m and q6_k (a few seconds each). mxfp4_moe,
llama.cpp's one MXFP4 recipe, makes expert tensors MXFP4 and the rest Q8_0: checked on the random model with 4
experts (random-moe) and, --pure (every matrix MXFP4), on the dense one."""
import hashlib
import json
import os

import pytest
from gguf import GGUFReader

from fastgguf.cli import main
from fastgguf.gguf import GGMLType, GGUFFile
from fastgguf.gguf.quantize import RECIPES, llama_plan, quantize_file, quantized_variant
import models

HERE = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
with open(os.path.join(HERE, "data", "quantize-hashes.json")) as _f:
    HASHES = json.load(_f)["sources"]
SMOL_BYTES = ("q4_k_m", "q6_k")  # the SmolLM2 recipes checked byte for byte (the others: type plan only)


def _sha(path):
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def _describe(path):
    r = GGUFReader(path)
    tensors = {t.name: [t.tensor_type.name, hashlib.sha256(t.data.tobytes()).hexdigest()] for t in r.tensors}
    kv = {k: int(r.fields[k].parts[-1][0]) for k in ("general.file_type", "general.quantization_version")}
    return {**kv, "tensors": tensors}


def _compare(got, want):
    assert got["general.file_type"] == want["general.file_type"]
    assert got["general.quantization_version"] == want["general.quantization_version"]
    assert sorted(got["tensors"]) == sorted(want["tensors"])
    types = {n: (g[0], want["tensors"][n][0]) for n, g in got["tensors"].items() if g[0] != want["tensors"][n][0]}
    assert not types, types
    bad = [n for n, g in got["tensors"].items() if g[1] != want["tensors"][n][1]]
    assert not bad, f"{len(bad)} tensors differ from llama-quantize's: {bad[:8]}"


@pytest.fixture(scope="module")
def random_model(tmp_path_factory):
    path = models.build(tmp_path_factory.mktemp("kq") / "random.gguf", "kq")
    assert _sha(path) == HASHES["random"]["sha256"], "tests/models.py no longer makes the file the hashes are of"
    return path


@pytest.fixture(scope="module")
def smol(default_model_path):
    if _sha(default_model_path) != HASHES["smollm2-q4_1"]["sha256"]:
        pytest.skip("the cached default model is not the file the hashes were made from")
    return default_model_path


def test_every_recipe_has_data():
    assert sorted(HASHES["random"]["recipes"]) == sorted(RECIPES)
    assert sorted(HASHES["smollm2-q4_1"]["recipes"]) == sorted(RECIPES)


@pytest.mark.parametrize("recipe", sorted(RECIPES))
def test_random_model_identical_to_llama_quantize(random_model, tmp_path, recipe):
    out = str(tmp_path / f"{recipe}.gguf")
    plan = quantize_file(random_model, out, recipe, n_threads=2)
    want = HASHES["random"]["recipes"][recipe]
    assert {n: t.name for n, t in plan.items()} == {n: v[0] for n, v in want["tensors"].items()}
    _compare(_describe(out), want)


@pytest.mark.parametrize("recipe", sorted(HASHES["random"]["pure"]))
def test_random_model_pure_identical_to_llama_quantize(random_model, tmp_path, recipe):
    out = str(tmp_path / f"{recipe}-pure.gguf")
    plan = quantize_file(random_model, out, recipe, pure=True, n_threads=2)
    want = HASHES["random"]["pure"][recipe]
    assert {n: t.name for n, t in plan.items()} == {n: v[0] for n, v in want["tensors"].items()}
    _compare(_describe(out), want)


def test_moe_model_mxfp4_moe_identical_to_llama_quantize(tmp_path):
    src = models.build(tmp_path / "moe.gguf", "kq", n_layer=2, n_expert=4)
    assert _sha(src) == HASHES["random-moe"]["sha256"], "tests/models.py no longer makes the hashed file"
    plan = quantize_file(src, str(tmp_path / "o.gguf"), "mxfp4_moe", n_threads=2)
    want = HASHES["random-moe"]["recipes"]["mxfp4_moe"]
    assert {n: t.name for n, t in plan.items()} == {n: v[0] for n, v in want["tensors"].items()}
    assert plan["blk.1.ffn_down_exps.weight"] == GGMLType.MXFP4 and plan["blk.1.attn_q.weight"] == GGMLType.Q8_0
    _compare(_describe(str(tmp_path / "o.gguf")), want)
    with pytest.raises(Exception, match="dense models only"):  # the other recipes have per-expert rules not done
        quantize_file(src, str(tmp_path / "k.gguf"), "q4_k_m", n_threads=1)


@pytest.mark.parametrize("recipe", sorted(RECIPES))
def test_smollm2_type_plan(smol, recipe):
    with GGUFFile(smol) as f:
        plan = llama_plan({n: (tuple(ti.shape), GGMLType(ti.type)) for n, ti in f.tensors.items()}, f.metadata,
                          recipe)
    assert {n: t.name for n, t in plan.items()} == \
        {n: v[0] for n, v in HASHES["smollm2-q4_1"]["recipes"][recipe]["tensors"].items()}


@pytest.mark.parametrize("recipe", SMOL_BYTES)
def test_smollm2_identical_to_llama_quantize(smol, recipe):
    # the cached variant (the fidelity tests use the same file)
    _compare(_describe(quantized_variant(smol, recipe)), HASHES["smollm2-q4_1"]["recipes"][recipe])


def test_cli_recipe_and_help(random_model, tmp_path, capsys):
    out = str(tmp_path / "o.gguf")
    assert main(["quantize", random_model, out, "--type", "Q4_K_M", "--quiet", "--threads", "1"]) == 0
    assert "Q6_K" in capsys.readouterr().out
    _compare(_describe(out), HASHES["random"]["recipes"]["q4_k_m"])
    with pytest.raises(SystemExit):
        main(["quantize", "--help"])
    text = " ".join(capsys.readouterr().out.split())
    assert "q4_k_m" in text and "iq4_nl" in text and "dequantized to float32 first" in text


def test_pure_recipe_keeps_fallbacks(random_model, tmp_path):
    plan = quantize_file(random_model, str(tmp_path / "p.gguf"), "q4_k_m", pure=True, n_threads=2)
    assert {t for n, t in plan.items() if n.endswith("norm.weight")} == {GGMLType.F32}
    assert {t for n, t in plan.items() if not n.endswith("norm.weight")} == {GGMLType.Q4_K}
    with GGUFFile(str(tmp_path / "p.gguf")) as f:
        assert f.metadata["general.file_type"] == 15
