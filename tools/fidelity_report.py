#!/usr/bin/env python3
"""Development-only: the fidelity table of tests/engine/test_model.py, measured on the full logits.

    python tools/fidelity_report.py [q4_1 q8_0 q4_0]

For each variant (SmolLM2-135M-Instruct.<V>.gguf in the model cache; Q8_0/Q4_0 made by our quantizer) and its
reference tests/data/smollm2-<v>-logits.json: median / p99 |logit diff| over the reference's top-10 ids at every
reference position, and the top-1 flips where the reference's top two are > 0.3 apart, for llama.cpp flash
attention off vs on (its own noise floor; needs llama-cpp-python), llama.cpp and fastgguf (every ISA) against
llama.cpp and against the float64 oracle (tests/oracle.py; slow: a minute per variant).
"""
import json
import os
import sys

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path[:0] = [os.path.join(HERE, ".."), os.path.join(HERE, "..", "tests")]  # run from a checkout


def compare(a, b, refs):
    """a, b: per prompt (n_tokens, n_vocab) logits; b is the reference."""
    d, flips = [], []
    for i, r in enumerate(refs):
        for p in r["positions"]:
            ra, rb = a[i][p["pos"]], b[i][p["pos"]]
            top = np.argsort(-rb, kind="stable")[:10]
            d.append(np.abs(ra[top] - rb[top]))
            if rb[top[0]] - rb[top[1]] > 0.3 and int(np.argmax(ra)) != top[0]:
                flips.append((i, p["pos"], round(float(rb[top[0]] - rb[top[1]]), 3)))
    d = np.concatenate(d)
    return f"median {np.median(d):.3f}  p99 {np.percentile(d, 99):.3f}  flips {flips}"


def main():
    from fastgguf import kernels
    from fastgguf.hub import default_model_path
    from fastgguf.kernels import available
    from fastgguf.engine.model import Model
    from fastgguf.gguf.quantize import quantized_variant
    from oracle import Oracle
    for v in sys.argv[1:] or ["q4_1", "q8_0", "q4_0"]:
        src = default_model_path()
        path = src if v == "q4_1" else quantized_variant(src, v)
        with open(os.path.join(HERE, "..", "tests", "data", f"smollm2-{v}-logits.json")) as f:
            refs = json.load(f)["results"]
        seqs = [r["prompt_ids"] + r["greedy_ids"] for r in refs]
        runs = {}
        try:
            import llama_cpp
            for fa in (True, False):
                llm = llama_cpp.Llama(model_path=path, n_ctx=512, n_batch=512, logits_all=True, flash_attn=fa,
                                      n_threads=2, verbose=False)
                runs[f"llama.cpp fa={'on' if fa else 'off'}"] = out = []
                for s in seqs:
                    llm.reset()
                    llm.eval(s)
                    out.append(np.array(llm.scores[:len(s)], dtype=np.float32))
                del llm
        except ImportError:
            print("(llama-cpp-python not installed: oracle distances only)")
        m = Model(path, n_threads=2)
        for isa in available():
            kernels.set_isa(isa)
            runs[f"fastgguf {isa}"] = [m.context(64).eval(s, all_logits=True) for s in seqs]
        o = Oracle(path)
        oracle = [o.forward(s) for s in seqs]
        for name, lg in runs.items():
            if "llama.cpp fa=on" in runs and name != "llama.cpp fa=on":
                print(f"{v} {name:>18} vs llama.cpp: {compare(lg, runs['llama.cpp fa=on'], refs)}")
            print(f"{v} {name:>18} vs oracle:    {compare(lg, oracle, refs)}")


if __name__ == "__main__":
    main()
