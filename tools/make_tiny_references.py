#!/usr/bin/env python3
"""Development-only: llama.cpp's logits for the tiny random-weight models of tests/engine/test_tiny_references.py
(every architecture and RoPE variant fastgguf runs), into tests/data/tiny-references.json.

    LLAMA_CPP_LIB_PATH=/work/ref/llama/build/bin python tools/make_tiny_references.py [--only A,B] [OUT.json]

It builds each case's GGUF with tests/models.py (deterministic: seeded weights, the GGUF writer), runs it in
llama.cpp through llama-cpp-python's low-level bindings (the 0.3.36 sdist's llama_cpp package on PYTHONPATH, or
an install; never a runtime dependency of fastgguf): the case's token ids in one batch, all logits, flash
attention on (the reference) and off (fa_spread: the largest difference over the reference's top-10 ids, which
sizes the test's tolerance), at each context size of the case. Stored: the top-10 ids and logits at every
position.

    python tools/make_tiny_references.py --encoders [OUT.json]

instead writes tests/data/tiny-encoder-references.json for tests/engine/test_tiny_encoder_references.py: the tiny
bert / nomic-bert files (tests/models.py's "encoder" ones, their small WordPiece vocabulary) through llama.cpp's own
tools, LLAMA_BIN (default ~/.cache/llama-ref/build/bin): llama-tokenize --ids gives each prompt's token ids, and
llama.cpp's per-token hidden states (the last layer's output, what llama-embedding --pooling none
--embd-normalize -1 prints) come through the bindings as above (libllama from LLAMA_BIN; embeddings on, pooling
none): llama-embedding's JSON on stdout is written by an asynchronous logger that can lose its last lines at exit.
On tiny bert-f32 the two agree to 5e-8 wherever the JSON came out whole. Stored: ids and vectors (7 decimals)."""
import ctypes
import json
import os
import sys
import tempfile
import types

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path[:0] = [os.path.join(HERE, "..", "tests"), os.path.join(HERE, "..", "tests", "engine"), os.path.join(HERE, "..")]


def import_llama_cpp():
    try:
        import diskcache  # noqa: F401  (imported by llama_cpp's package, used only by its prompt cache)
    except ImportError:
        sys.modules["diskcache"] = types.ModuleType("diskcache")
    import llama_cpp
    return llama_cpp


# cases run without llama.cpp's weight repacking (extra buffer types): its AMX repack of the Q8_0 qwen35 file (the
# 4-row ssm_beta / ssm_alpha matrices) crashes in llama_decode (0.3.36's build, a CPU with AMX)
NO_REPACK = {"qwen35-q8_0"}


def _decode_rows(L, path, ids, configure, row, repack=True):
    """Load path in llama.cpp, run ids at positions 0.. as one batch in a context configure(params) sets up (2
    threads), and return float32 rows row(L, model, ctx, i) of every token (repack False: no extra buffer
    types)."""
    mp = L.llama_model_default_params()
    mp.use_extra_bufts = repack
    model = L.llama_model_load_from_file(path.encode(), mp)
    if not model:
        raise RuntimeError(f"llama.cpp could not load {path}")
    cp = L.llama_context_default_params()
    cp.n_threads = cp.n_threads_batch = 2
    configure(cp)
    ctx = L.llama_init_from_model(model, cp)
    batch = L.llama_batch_init(len(ids), 0, 1)
    try:
        for i, t in enumerate(ids):
            batch.token[i], batch.pos[i], batch.n_seq_id[i], batch.logits[i] = t, i, 1, 1
            batch.seq_id[i][0] = 0
        batch.n_tokens = len(ids)
        if L.llama_decode(ctx, batch) != 0:
            raise RuntimeError("llama_decode failed")
        return np.array([row(L, model, ctx, i) for i in range(len(ids))], dtype=np.float32)
    finally:
        L.llama_batch_free(batch)
        L.llama_free(ctx)
        L.llama_model_free(model)


def run(L, path, ids, n_ctx, flash, repack=True):
    """llama.cpp's logits (len(ids), n_vocab) for ids at positions 0.. in one batch."""
    def configure(cp):
        cp.n_ctx, cp.n_batch, cp.n_ubatch = n_ctx, n_ctx, n_ctx
        cp.flash_attn_type = L.LLAMA_FLASH_ATTN_TYPE_ENABLED if flash else L.LLAMA_FLASH_ATTN_TYPE_DISABLED

    def logits(L, model, ctx, i):
        n_vocab = L.llama_vocab_n_tokens(L.llama_model_get_vocab(model))
        return np.ctypeslib.as_array(ctypes.cast(L.llama_get_logits_ith(ctx, i), ctypes.POINTER(ctypes.c_float)),
                                     shape=(n_vocab,))
    return _decode_rows(L, path, ids, configure, logits, repack)


def run_tool(args):
    import subprocess
    r = subprocess.run(args, capture_output=True, text=True, timeout=300)
    if r.returncode != 0:
        raise RuntimeError(f"{args[0]} failed ({r.returncode}): {r.stderr[-2000:]}")
    return r.stdout


def embed(L, path, ids):
    """llama.cpp's per-token hidden states (len(ids), n_embd) of one input (llama_decode runs encode() for it)."""
    def configure(cp):
        cp.n_ctx = cp.n_batch = cp.n_ubatch = 512
        cp.embeddings = True
        cp.pooling_type = L.LLAMA_POOLING_TYPE_NONE

    def hidden(L, model, ctx, i):
        return np.ctypeslib.as_array(L.llama_get_embeddings_ith(ctx, i), shape=(L.llama_model_n_embd(model),))
    return _decode_rows(L, path, ids, configure, hidden)


def encoders_main(out_path):
    from test_tiny_encoder_references import ENCODER_CASES, PROMPTS, build
    bin_dir = os.path.expanduser(os.environ.get("LLAMA_BIN", "~/.cache/llama-ref/build/bin"))
    os.environ.setdefault("LLAMA_CPP_LIB_PATH", bin_dir)
    L = import_llama_cpp()
    L.llama_backend_init()
    cases = {}
    with tempfile.TemporaryDirectory() as tmp:
        for name in ENCODER_CASES:
            path = build(name, os.path.join(tmp, f"{name}.gguf"))
            runs = []
            for prompt in PROMPTS:
                out = run_tool([os.path.join(bin_dir, "llama-tokenize"), "-m", path, "-p", prompt, "--ids",
                                "--log-disable"])
                ids = json.loads(out.strip().splitlines()[-1])
                vecs = [[round(float(v), 7) for v in row] for row in embed(L, path, ids)]
                runs.append({"prompt": prompt, "ids": ids, "hidden": vecs})
                print(f"{name}: {prompt[:30]!r}: {len(ids)} tokens")
            cases[name] = runs
    ref = {"engine": f"llama.cpp's llama-tokenize and libllama through llama-cpp-python {L.__version__}'s "
                     f"bindings ({bin_dir})",
           "note": "tests/engine/test_tiny_encoder_references.py ENCODER_CASES; per-token raw hidden states "
                   "(--pooling none --embd-normalize -1)", "cases": cases}
    with open(out_path, "w") as f:
        json.dump(ref, f, separators=(",", ":"))


def main():
    if sys.argv[1:2] == ["--encoders"]:
        return encoders_main(sys.argv[2] if len(sys.argv) > 2 else os.path.join(
            HERE, "..", "tests", "data", "tiny-encoder-references.json"))
    args = sys.argv[1:]
    only = None   # --only NAME,NAME: run just those cases and merge them into the existing file (others kept as is)
    if args[:1] == ["--only"]:
        only, args = args[1].split(","), args[2:]
    out_path = args[0] if args else os.path.join(HERE, "..", "tests", "data", "tiny-references.json")
    L = import_llama_cpp()
    L.llama_backend_init()
    from test_tiny_references import CASES, IDS, build
    cases, old = {}, None
    if only:
        with open(out_path) as f:
            old = json.load(f)
        cases = old["cases"]
    with tempfile.TemporaryDirectory() as tmp:
        for name in only or CASES:
            path = build(name, os.path.join(tmp, f"{name}.gguf"))
            runs = []
            for n_ctx in CASES[name][1]:
                rp = name not in NO_REPACK
                on, off = run(L, path, IDS, n_ctx, True, rp), run(L, path, IDS, n_ctx, False, rp)
                positions, spread = [], 0.0
                for pos, row in enumerate(on):
                    top = np.argsort(-row, kind="stable")[:10]
                    spread = max(spread, float(np.max(np.abs(row[top] - off[pos][top]))))
                    positions.append({"pos": pos, "top_ids": [int(t) for t in top],
                                      "top_logits": [round(float(row[t]), 5) for t in top]})
                runs.append({"n_ctx": n_ctx, "fa_spread": round(spread, 6), "positions": positions})
                print(f"{name} n_ctx {n_ctx}: flash on/off spread {spread:.2e}, logit range "
                      f"{on.min():.2f}..{on.max():.2f}")
            cases[name] = runs
    ref = {"engine": f"llama.cpp via llama-cpp-python {L.__version__} low-level bindings "
                     f"(LLAMA_CPP_LIB_PATH={os.environ.get('LLAMA_CPP_LIB_PATH', '')})",
           "note": "tests/engine/test_tiny_references.py CASES; top-10 logits at every position, flash "
                   "attention on; fa_spread = max |flash on - off| over those ids",
           "ids": IDS, "cases": cases}
    if old:   # --only: the file's own header stays; its note says which cases came later, from where
        ref.update(engine=old["engine"], note=f"{old['note']}; the cases {', '.join(only)} were added with --only "
                                              f"(LLAMA_CPP_LIB_PATH={os.environ.get('LLAMA_CPP_LIB_PATH', '')})")
    with open(out_path, "w") as f:
        json.dump(ref, f, separators=(",", ":"))


# ---- pooling (embeddings, rerank): llama.cpp's llama-embedding on tests/engine/test_pooling.py's files ----------

POOLING_TEXTS = ["The cat sat on the mat.", "Quantum chromodynamics", "a", "naïve café — ünïcode ✓ 東京",
                 "def f(x):\n    return x * 2\n", "Paris is the capital and most populous city of France."]
POOLING_PAIRS = [("Where is Paris?", "Paris is the capital of France."), ("Where is Paris?", "Rust is a language."),
                 ("what is 2+2", "four")]


def llama_embedding(binary, path, texts, pooling, normalize):
    """llama-embedding's vectors (its JSON output) for texts, each an input, one run, 2 threads."""
    import subprocess
    sep = "<#fg-sep#>"
    cmd = [binary, "-m", path, "-t", "2", "--pooling", pooling, "--embd-normalize", str(normalize),
           "--embd-output-format", "json", "--embd-separator", sep, "-p", sep.join(texts)]
    r = subprocess.run(cmd, capture_output=True, text=True, check=True)
    # read line by line, not as JSON: for rank it prints n_embd values of which only the first n_cls_out are set
    # (the rest can be any bits, nan included)
    head = '"embedding": ['
    return [[float(x) for x in line.split(head, 1)[1].split("]", 1)[0].split(",")]
            for line in r.stdout.splitlines() if head in line]


def pooling_main(out_path):
    """tests/data/pooling-references.json: per case of test_pooling.LLAMA_CASES, llama-embedding --pooling <the
    file's> on POOLING_TEXTS (L2-normalized, its default; pooling none: every token's row), and for the rank case
    the scores of POOLING_PAIRS (query<TAB>document through the file's rerank template, --embd-normalize -1: raw
    head outputs, the first n_cls_out = 2 kept)."""
    binary = os.environ.get("LLAMA_EMBEDDING", os.path.expanduser("~/.cache/llama-ref/build/bin/llama-embedding"))
    from test_pooling import LLAMA_CASES, build
    cases = {}
    with tempfile.TemporaryDirectory() as tmp:
        for name in LLAMA_CASES:
            path = build(name, os.path.join(tmp, f"{name}.gguf"))
            if name.startswith("rank"):
                vecs = llama_embedding(binary, path, [f"{q}\t{d}" for q, d in POOLING_PAIRS], "rank", -1)
                cases[name] = [[round(float(x), 7) for x in v[:2]] for v in vecs]
            else:
                vecs = llama_embedding(binary, path, POOLING_TEXTS, name, 2)
                cases[name] = [[round(float(x), 7) for x in v] for v in vecs]
            print(f"{name}: {len(vecs)} vectors")
    ref = {"engine": f"llama.cpp's llama-embedding ({binary}), -t 2",
           "note": "tests/engine/test_pooling.py LLAMA_CASES: per case the vectors of texts (rank: the scores "
                   "[yes, no] of pairs)", "texts": POOLING_TEXTS, "pairs": POOLING_PAIRS, "cases": cases}
    with open(out_path, "w") as f:
        json.dump(ref, f, ensure_ascii=False, separators=(",", ":"))


if __name__ == "__main__":
    # python tools/make_tiny_references.py --pooling [OUT.json]: the pooling references (llama-embedding binary:
    # $LLAMA_EMBEDDING, default ~/.cache/llama-ref/build/bin/llama-embedding); else the logits references
    if sys.argv[1:2] == ["--pooling"]:
        pooling_main(sys.argv[2] if len(sys.argv) > 2 else os.path.join(HERE, "..", "tests", "data",
                                                                         "pooling-references.json"))
    else:
        main()
