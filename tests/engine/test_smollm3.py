"""smollm3 (fastgguf/arch/smollm3.py): which layers are NoPE, and that no key of the file can change that (llama.cpp
fixes the step at 4 and reads no key for it). Its logits against llama.cpp (both paths) are in
test_tiny_references.py, against the float64 oracle in test_model.py's test_tiny_model_matches_oracle."""
import numpy as np
import pytest

import models
from fastgguf.arch import Hparams
from fastgguf.engine.model import Model
from test_batch import check_same, decode_schedules

IDS = [5, 17, 99, 0, 42, 42, 7, 63, 1, 2]


@pytest.mark.parametrize("n_layer, nope", [(3, ()), (4, (3,)), (8, (3, 7)), (9, (3, 7))])
def test_every_fourth_layer_is_nope(tmp_path, n_layer, nope):
    hp = Model(models.build(tmp_path / "s.gguf", arch="smollm3", n_layer=n_layer)).hparams
    assert hp.nope_layers == nope and hp.swa_layers == () and not hp.rope_neox


@pytest.mark.parametrize("value", [0, 1, 2**32 - 1, -1.0, 1e30, "2"])
def test_a_no_rope_step_key_is_ignored_as_llama_cpp_does(tmp_path, value):
    """Hugging Face's no_rope_layer_interval has no GGUF key in llama.cpp (n_no_rope_layer_step = 4 in
    src/models/smollm3.cpp, nothing read): a file that carries one anyway, with any value, runs as without it."""
    plain = Model(models.build(tmp_path / "a.gguf", arch="smollm3", n_layer=4))
    keyed = Model(models.build(tmp_path / "b.gguf", arch="smollm3", n_layer=4,
                               meta={"no_rope_layer_step": value, "no_rope_layer_interval": value}))
    assert keyed.hparams == plain.hparams
    np.testing.assert_array_equal(keyed.context(16).eval(IDS, all_logits=True),
                                  plain.context(16).eval(IDS, all_logits=True))


def test_batched_rows_equal_each_alone(tmp_path):
    """Several sequences' prompts and decode steps in one pass (the NoPE layer among them), bit for bit as each
    alone."""
    m = Model(models.build(tmp_path / "s.gguf", arch="smollm3", n_layer=5), n_threads=2)
    check_same(m, decode_schedules(np.random.default_rng(0), 100, [1, 7, 20], 5), [32, 32, 64], 2)


def test_nope_layers_out_of_range_are_refused():
    dims = dict(arch="smollm3", n_embd=64, n_layer=4, n_head=4, n_head_kv=2, head_dim=16, n_ff=96, n_vocab=100,
                n_rot=16, rope_neox=False, norm_eps=1e-5, rope_base=1e4, rope_freq_scale=1.0, attn_scale=0.25,
                n_ctx_train=128)
    Hparams(**dims, nope_layers=(3,)).check()
    for bad in ((4,), (-1,)):
        with pytest.raises(ValueError, match="NoPE layers"):
            Hparams(**dims, nope_layers=bad).check()
