"""Regenerate tests/data/gemma3-tokenizer.json: llama.cpp's token ids for the Gemma 3 vocabulary (SentencePiece,
262,144 tokens, byte fallback) on a set of hard cases, with and without special-token parsing.

    python tools/gen_gemma3_tokenizer.py [MODEL.gguf] [LLAMA_TOKENIZE]

Defaults: the catalogue's gemma3-270m file (fastgguf pull gemma3-270m) and /work/ref/llama/build/bin/llama-tokenize
(a llama.cpp build: dev-only). Each case is run through `llama-tokenize --ids --log-disable --stdin` (with
--no-parse-special for the unparsed variant); the BOS is part of its ids, as fastgguf's add_special=True."""
import ast
import json
import os
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
OUT = os.path.join(HERE, "..", "tests", "data", "gemma3-tokenizer.json")

CASES = [
    "Hello world",
    " Hello world",
    "Hello  world",
    "   leading and trailing spaces   ",
    "tabs\tand\nnewlines\n\n\nand\r\nCRLF",
    "    four spaces\n        eight spaces",
    "                                                                 many spaces",
    "\n\n\n\n\n",
    "def fib(n):\n    if n < 2:\n        return n\n    return fib(n - 1) + fib(n - 2)\n",
    "for (int i = 0; i < n; i++) { x[i] += y[i] * 2; }  // comment",
    "<html><body class=\"x\">&amp; &lt;tag&gt;</body></html>",
    "Emoji: 😀👍🏽🇫🇷 ❤️ 🧑‍💻",
    "日本語のテキストと中文文本和한국어 텍스트",
    "Ünïcödé àccénts: naïve café résumé Straße",
    "Numbers 1234567890 3.14159 -42 1e-5 0x1F",
    "<start_of_turn>user\nWhat is 2+2?<end_of_turn>\n<start_of_turn>model\n",
    "<bos>text after an explicit bos<eos>",
    "a<start_of_turn>b <end_of_turn> c",
    "Mixed: The quick brown fox — jumps over «the» lazy dog… 50% off!",
    "URL https://example.com/path?q=1&r=two#frag and email a.b@c.de",
    "\u00a0non-breaking\u2009thin\u200bzero-width space",
    "Arabic مرحبا بالعالم and Hebrew שלום עולם",
    "Control \x01\x02\x7f chars",
    "Rare: \U0001F9EC \u2603 \U00010348 \uFFFD",
    "",
    " ",
    "a",
    "aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa",
    "<unused0> <mask> [multimodal] <start_of_image>",
]


def run(tok, model, text, parse_special):
    cmd = [tok, "-m", model, "--ids", "--log-disable", "--stdin"] + ([] if parse_special else ["--no-parse-special"])
    out = subprocess.run(cmd, input=text.encode(), capture_output=True, check=True).stdout.decode()
    return [int(i) for i in ast.literal_eval(out.strip().splitlines()[-1])]


def main():
    model = sys.argv[1] if len(sys.argv) > 1 else None
    if model is None:
        from fastgguf import hub
        model = hub.model_path("gemma3-270m")
    tok = sys.argv[2] if len(sys.argv) > 2 else "/work/ref/llama/build/bin/llama-tokenize"
    cases = [{"text": t, "parse_special": ps, "ids": run(tok, model, t, ps)} for t in CASES for ps in (False, True)]
    with open(OUT, "w") as f:
        json.dump({"model_file": os.path.basename(model), "tool": "llama-tokenize (llama.cpp) --ids --stdin",
                   "cases": cases}, f, ensure_ascii=False, indent=0)
    print(f"{len(cases)} cases -> {OUT}")


if __name__ == "__main__":
    main()
