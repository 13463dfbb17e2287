"""Mixtures of experts (csrc/fg_forward.c moe_ffn, fastgguf/arch qwen3moe/qwen2moe/granitemoe/llama with
expert_count): the tiny random files of test_tiny_references against the float64 oracle (tests/oracle.py), the
routing edge cases (ties, every expert used, one expert, a batch whose rows all pick the same experts, one whose
rows pick them all), batched == solo bit for bit on 1 and 2 threads, and the hyperparameter checks."""
import numpy as np
import pytest

gguf = pytest.importorskip("gguf")

from fastgguf.engine.batch import forward_batch  # noqa: E402
from fastgguf.engine.model import Model  # noqa: E402
from fastgguf.errors import GGUFError  # noqa: E402
import models  # noqa: E402
from models import tie_router  # noqa: E402
from oracle import Oracle  # noqa: E402
from test_tiny_references import CASES, IDS, build  # noqa: E402

pytestmark = pytest.mark.filterwarnings("ignore:n_ctx=.*exceeds the model's training context:RuntimeWarning")

# the F32 cases: fastgguf equals the oracle up to float32 sums and Q8_0-free activations (measured <= 1e-4)
F32_CASES = [n for n, (o, _) in CASES.items() if "moe" in o and "wtype" not in o["moe"]] + ["granite"]


# name -> models.build options (preset "moe") of the routing edge cases
EDGE = {
    "ties": {"router": tie_router, "n_used": 3},
    "all-used": {"n_expert": 4, "n_used": 4},
    "one-expert": {"n_expert": 1, "n_used": 1},
    "same-experts": {"router": lambda i, r: np.zeros_like(r)},   # all logits 0: every row takes experts 0 and 1
    "128x8": {"n_expert": 128, "n_used": 8, "n_ff_exp": 16},
    "olmoe": {"arch": "olmoe", "n_head_kv": 4},   # whole-vector q/k norms: one row takes the batch path too
    # gpt-oss with expert biases spread 8: most gate/up values pass SWIGLU_OAI's clamp at 7
    "gpt-oss-clamped": {"arch": "gpt-oss", "n_expert": 4, "scale": {"expert_bias": 8.0},
                        "meta": {"attention.sliding_window": 5}},
}


def check_oracle(path, tol=1e-3):
    o = Oracle(path)
    want = o.forward(IDS, kv_f16=True)
    got = Model(path, n_threads=2).context(256).eval(IDS, all_logits=True)
    assert np.max(np.abs(got - want)) <= tol, np.max(np.abs(got - want))
    return o


# gpt-oss's random files (biases, sinks) amplify the F16 K/V cache's rounding: a 1e-7 relative change of the q/k/v
# weights (an ISA's other float32 summation order) flips some F16 roundings and moves the oracle's own logits by up
# to 8.5e-4 on gpt-oss-f32 (qwen3moe-8x2: 4.5e-5); measured fastgguf - oracle: 6e-5 (scalar, AVX-512), 2.2e-3
# (AVX2). Dropping a sink, a bias or the window moves them by 0.49 to 7.
GPTOSS_TOL = 5e-3


@pytest.mark.parametrize("name", F32_CASES)
def test_tiny_cases_match_the_oracle(tmp_path, name):
    check_oracle(build(name, tmp_path / f"{name}.gguf"), GPTOSS_TOL if "gpt-oss" in name else 1e-3)


@pytest.fixture(scope="module")
def edge_files(tmp_path_factory):
    d = tmp_path_factory.mktemp("moe")
    return {n: models.build(d / f"{n}.gguf", "moe", seed=3, **kw) for n, kw in EDGE.items()}


@pytest.mark.parametrize("name", sorted(EDGE))
def test_routing_edge_cases_match_the_oracle(edge_files, name):
    """The oracle picks the top experts with a stable descending sort (ties to the lower expert, as llama.cpp's
    std::sort does for <= 16 experts: an insertion sort); a tie broken the other way picks another expert, whose
    random weights move the logits far past the tolerance."""
    o = check_oracle(edge_files[name], GPTOSS_TOL if "gpt-oss" in name else 1e-3)
    chosen = set().union(*o.selected)
    if name == "same-experts":
        assert chosen == {0, 1}
    if name in ("ties", "all-used"):   # the batch's rows pick every expert between them
        assert chosen == set(range(EDGE[name].get("n_expert", 8)))


@pytest.mark.parametrize("name", sorted(EDGE))
def test_batched_equals_solo_on_any_thread_count(edge_files, name):
    """One 24-row prompt, token-by-token decoding, and a batch of three sequences mixing a prompt chunk with
    decode steps: every row's logits bit-identical, on 1 and 2 threads."""
    m2, m1 = Model(edge_files[name], n_threads=2), Model(edge_files[name], n_threads=1)
    whole = m2.context(64).eval(IDS, all_logits=True)
    assert np.array_equal(whole, m1.context(64).eval(IDS, all_logits=True))
    c = m1.context(64)
    steps = np.array([c.eval([t]) for t in IDS])
    assert np.array_equal(whole, steps)
    for m in (m1, m2):
        a, b, c = m.context(64), m.context(64), m.context(64)
        a.eval(IDS[:10])
        got = forward_batch(m, [(a, IDS[10:]), (b, IDS[:5]), (c, IDS[:1])], outputs=["all", "all", "all"])
        assert np.array_equal(got[0], whole[10:])
        assert np.array_equal(got[1], whole[:5])
        assert np.array_equal(got[2], whole[:1])


@pytest.mark.parametrize("kw, key", [
    ({"n_used": 9}, "expert_used_count"), ({"n_used": 0}, "expert_used_count"),
    ({"meta": {"expert_count": 1 << 20}}, "expert_count"),
    ({"meta": {"expert_feed_forward_length": 0}}, "expert_feed_forward_length"),
    ({"meta": {"expert_feed_forward_length": 48}}, "ffn_gate_exps"),   # not the tensors' width
])
def test_hostile_expert_hyperparameters_are_gguf_errors(tmp_path, kw, key):
    p = models.build(tmp_path / "bad.gguf", "moe", **kw)
    with pytest.raises(GGUFError, match=key):
        Model(p)


def test_memory_counts_expert_bytes_and_the_bytes_a_token_reads(tmp_path):
    """8 F32 experts of (32 x 64) gate/up/down, 2 used, 2 layers: the stacks are 2 * 3 * 8 * 32 * 64 * 4 bytes, a
    token reads 2/8 of them plus everything else (the untied output whole, one token_embd row)."""
    m = Model(models.build(tmp_path / "m.gguf", "moe", arch="llama"))
    mem = m.memory()
    experts = 2 * 3 * 8 * 32 * 64 * 4
    weights = sum(t.nbytes for t in m.file.tensors.values())
    emb = 100 * 64 * 4
    assert (mem["experts"], mem["weights"]) == (experts, weights)
    assert mem["per_token"] == weights - experts + experts * 2 // 8 - emb + emb // 100
    assert mem["file"] >= weights
    from fastgguf.cli.info import memory
    assert mem["packed"] == 0  # repack=True's copies: a loaded Model's, not the file's
    assert memory(m.file) == {k: v for k, v in mem.items() if k != "packed"}


def test_info_prints_the_expert_bytes(tmp_path, capsys):
    from fastgguf import cli
    p = models.build(tmp_path / "m.gguf", "moe", arch="llama")
    assert cli.main(["info", p, "--no-tensors"]) == 0
    out = capsys.readouterr().out
    mem = Model(p).memory()
    assert "experts: 384.0 KiB of the weights" in out   # 2 * 3 * 8 * 32 * 64 * 4 bytes
    assert f"read per decoded token: {mem['per_token'] / 1024:.1f} KiB" in out


GPTOSS = {"arch": "gpt-oss", "n_expert": 4, "meta": {"attention.sliding_window": 5}}


@pytest.mark.parametrize("wtype", [None, "MXFP4"])
def test_gpt_oss_sliding_window_ring_wraps(tmp_path, wtype):
    """gpt-oss's window (5 here) on its even layers with a prompt longer than the K/V ring (n_swa + FG_MAX_BATCH =
    261 rows): a 270-token prompt, then decode steps past 300, equal the whole 300 tokens run as one prompt, bit
    for bit, on 1 and 2 threads; F32 experts equal the float64 oracle there too."""
    p = models.build(tmp_path / "oss.gguf", "moe", seed=5, wtype=wtype, **GPTOSS)
    ids = [int(t) for t in np.random.default_rng(1).integers(0, 100, 300)]
    m1, m2 = Model(p, n_threads=1), Model(p, n_threads=2)
    whole = m2.context(320).eval(ids, all_logits=True)
    c = m1.context(320)
    steps = [c.eval(ids[:270], all_logits=True)] + [c.eval([t])[None] for t in ids[270:]]
    assert np.array_equal(np.concatenate(steps), whole)
    if wtype is None:
        want = Oracle(p).forward(ids, kv_f16=True)
        assert np.max(np.abs(whole - want)) <= GPTOSS_TOL, np.max(np.abs(whole - want))


def test_gpt_oss_hyperparameters(tmp_path):
    """The even layers slide (llama.cpp's swa pattern 2), a window is required, experts are required."""
    m = Model(models.build(tmp_path / "oss.gguf", "moe", n_layer=3, **GPTOSS))
    hp = m.hparams
    assert (hp.swa_layers, hp.n_swa, hp.moe_gating, hp.moe_act, hp.moe_norm_w) == \
        ((0, 2), 5, "softmax_weight", "swiglu_oai", False)
    with pytest.raises(GGUFError, match="sliding_window"):
        Model(models.build(tmp_path / "nowin.gguf", "moe", arch="gpt-oss", n_expert=4))
    with pytest.raises(GGUFError, match="expert_count"):
        Model(models.build(tmp_path / "noexp.gguf", "moe", arch="gpt-oss",
                           meta={"expert_count": 0, "attention.sliding_window": 5}))


def test_gpt_oss_info(tmp_path, capsys):
    """fastgguf info on a gpt-oss file with MXFP4 experts: the expert bytes count the expert biases (a token reads
    the chosen experts' rows of them too)."""
    from fastgguf import cli
    p = models.build(tmp_path / "oss.gguf", "moe", wtype="MXFP4", **GPTOSS)
    assert cli.main(["info", p, "--no-tensors"]) == 0
    out = capsys.readouterr().out
    assert "gpt-oss" in out and "MXFP4" in out
    m = Model(p)
    stacks = sum(t.nbytes for n, t in m.file.tensors.items() if n.endswith("_exps.weight"))
    biases = sum(t.nbytes for n, t in m.file.tensors.items() if n.endswith("_exps.bias"))
    assert biases > 0 and m.memory()["experts"] == stacks + biases
