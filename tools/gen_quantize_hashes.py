#!/usr/bin/env python3
"""Development-only: the per-tensor sha256 of llama-quantize's outputs, so that CI checks that `fastgguf quantize`
writes the same bytes without llama.cpp (tests/gguf/test_quantize_kquants.py reads tests/data/quantize-hashes.json).

    python tools/gen_quantize_hashes.py --llama-quantize /path/to/llama-quantize [--smollm2 SmolLM2...Q4_1.gguf]
        [--recipes a,b] [--pure]

Sources: "random" (tests/models.py "kq": dimensions multiples of 256, F16/F32 weights), with --moe "random-moe" (the
same with 2 layers and 4 experts, Mixtral layout) and, with --smollm2, the default model's Q4_1 file (requantized:
`--allow-requantize`). For each recipe: llama-quantize IN OUT TYPE 1, then every
tensor's ggml type and the sha256 of its bytes, and the output's general.file_type / general.quantization_version.
With --pure (`llama-quantize --pure`) they go under the source's "pure" entry instead of "recipes". An existing output
file is updated: only the recipes run are replaced.
"""
import argparse
import hashlib
import json
import os
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "tests"))
OUT = os.path.join(HERE, "..", "tests", "data", "quantize-hashes.json")
RECIPES = ["q4_k_m", "q4_k_s", "q5_k_m", "q5_k_s", "q6_k", "q3_k_m", "q2_k", "q5_0", "q5_1", "iq4_nl", "mxfp4_moe"]


def sha256_file(path):
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def describe(path):
    from gguf import GGUFReader
    r = GGUFReader(path)
    tensors = {t.name: [t.tensor_type.name, hashlib.sha256(bytes(t.data.tobytes())).hexdigest()] for t in r.tensors}
    kv = {k: int(r.fields[k].parts[-1][0]) for k in ("general.file_type", "general.quantization_version")}
    return {**kv, "tensors": tensors}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--llama-quantize", required=True)
    ap.add_argument("--smollm2", help="SmolLM2-135M-Instruct.Q4_1.gguf")
    ap.add_argument("--recipes", default=",".join(RECIPES))
    ap.add_argument("--moe", action="store_true", help="the random-moe source too")
    ap.add_argument("--pure", action="store_true", help="llama-quantize --pure (stored under \"pure\")")
    ap.add_argument("--out", default=OUT)
    a = ap.parse_args()
    import models

    tmp = tempfile.mkdtemp()
    sources = {"random": models.build(os.path.join(tmp, "random.gguf"), "kq")}
    if a.moe:
        sources["random-moe"] = models.build(os.path.join(tmp, "random-moe.gguf"), "kq", n_layer=2, n_expert=4)
    if a.smollm2:
        sources["smollm2-q4_1"] = a.smollm2
    version = subprocess.run([a.llama_quantize, "--help"], capture_output=True, text=True)
    result = {"tool": "tools/gen_quantize_hashes.py", "llama_quantize": "llama.cpp vendored in llama-cpp-python "
              "0.3.36, `llama-quantize --allow-requantize IN OUT TYPE 1`", "sources": {}}
    if os.path.exists(a.out):
        with open(a.out) as f:
            result = json.load(f)
    del version
    for key, src in sources.items():
        entry = result["sources"].setdefault(key, {})
        entry.update(file=os.path.basename(src), sha256=sha256_file(src))
        for recipe in a.recipes.split(","):
            out = os.path.join(tmp, f"{key}.{recipe}.gguf")
            subprocess.run([a.llama_quantize, "--allow-requantize", *(["--pure"] if a.pure else []), src, out,
                            recipe.upper(), "1"], check=True, capture_output=True)
            entry.setdefault("pure" if a.pure else "recipes", {})[recipe] = describe(out)
            os.remove(out)
            print(key, recipe, file=sys.stderr)
        result["sources"][key] = entry
    with open(a.out, "w") as f:
        json.dump(result, f, indent=1, sort_keys=False)
        f.write("\n")


if __name__ == "__main__":
    main()
