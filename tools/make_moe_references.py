#!/usr/bin/env python3
"""Development-only: llama.cpp's logits on the upcycled SmolLM2 with perturbed experts (tests/models.py upcycle:
4 experts that are scaled copies of each layer's FFN, 2 used, a random router, small: ROUTER_SCALE), teacher-forced,
into tests/data/upcycled-moe-references.json for tests/engine/test_upcycle.py.

    PYTHONPATH=~/.cache/llama-ref/llama_cpp_python-0.3.36 LLAMA_CPP_LIB_PATH=~/.cache/llama-ref/build/bin \\
        python tools/make_moe_references.py [OUT.json]

Per prompt: the token ids (fastgguf's tokenizer, stored) are the prompt and 16 tokens of the dense model's greedy
continuation (fastgguf); llama.cpp runs them in one batch with flash attention on (the reference: top-10 ids and
logits at every position) and off: per position d = the largest |on - off| over those ids; fa_spread = max d,
fa_median = median d."""
import json
import os
import sys
import tempfile

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path[:0] = [HERE, os.path.join(HERE, "..", "tests"), os.path.join(HERE, "..")]

from make_tiny_references import import_llama_cpp, run  # noqa: E402
from models import upcycle  # noqa: E402

from fastgguf import hub  # noqa: E402
from fastgguf.engine.model import Model  # noqa: E402

PROMPTS = ["The capital of France is", "def fibonacci(n):", "Once upon a time, in a small village,"]
SCALES = (1.0, 0.9, 1.1, 0.95)   # expert e is the dense FFN with its matrices scaled by SCALES[e]
ROUTER_SCALE = 0.02   # router = ROUTER_SCALE * standard normal draws: smooth weights, so a near-tie that flips
                      # the choice of an expert moves the output a little, not chaotically (1.0: llama.cpp's own
                      # flash on/off runs differ by up to 12 logits there)


def router(i, r):
    return r * ROUTER_SCALE
N_CONT = 16


def main(out_path):
    L = import_llama_cpp()
    L.llama_backend_init()
    src = hub.default_model_path(download=False)
    dense = Model(src, n_threads=2)
    runs = []
    with tempfile.TemporaryDirectory() as tmp:
        path = upcycle(src, os.path.join(tmp, "up.gguf"), scales=SCALES, router=router)
        for prompt in PROMPTS:
            ids = dense.tokenize(prompt)
            ids = ids + dense.generate(ids, temperature=0, max_tokens=N_CONT).token_ids
            on, off = run(L, path, ids, 256, True), run(L, path, ids, 256, False)
            positions, d = [], []
            for pos, row in enumerate(on):
                top = np.argsort(-row, kind="stable")[:10]
                d.append(float(np.max(np.abs(row[top] - off[pos][top]))))
                positions.append({"pos": pos, "top_ids": [int(t) for t in top],
                                  "top_logits": [round(float(row[t]), 5) for t in top]})
            runs.append({"prompt": prompt, "ids": [int(i) for i in ids], "fa_spread": round(max(d), 6),
                         "fa_median": round(float(np.median(d)), 6), "positions": positions})
            print(f"{prompt!r}: {len(ids)} tokens, flash on/off: largest {max(d):.3f}, median {np.median(d):.3f}")
    ref = {"engine": f"llama.cpp via llama-cpp-python {L.__version__} low-level bindings "
                     f"(LLAMA_CPP_LIB_PATH={os.environ.get('LLAMA_CPP_LIB_PATH', '')})",
           "model": f"tests/models.py upcycle({os.path.basename(src)}, scales={list(SCALES)}, seed=0, "
                    f"router=draws * {ROUTER_SCALE})",
           "runs": runs}
    with open(out_path, "w") as f:
        json.dump(ref, f, separators=(",", ":"))


if __name__ == "__main__":
    main(sys.argv[1] if len(sys.argv) > 1 else os.path.join(HERE, "..", "tests", "data",
                                                            "upcycled-moe-references.json"))
