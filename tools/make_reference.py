#!/usr/bin/env python3
"""Development-only: make llama.cpp reference outputs (the format of ../shared/reference/smollm2-q4_1-logits.json)
for any GGUF file, through llama-cpp-python. Used for the Q8_0 and Q4_0 variants our quantizer makes.

    python tools/make_reference.py MODEL.gguf OUT.json [--prompts-from tests/data/smollm2-q4_1-logits.json]
        [--n-ctx 512] [--flash on|off] [--stride N]

Gemma 3 (tests/data/gemma3-logits.json, and -fa-off.json for llama.cpp's own flash on/off spread):
    python tools/make_reference.py gemma-3-270m-q4_k_m.gguf tests/data/gemma3-logits.json \
        --prompts-from tests/data/gemma3-prompts.json --n-ctx 1024 --stride 16
Without a llama-cpp-python install, its sources run against a llama.cpp build's libllama.so:
    PYTHONPATH=llama_cpp_python-0.3.36:<diskcache> LLAMA_CPP_LIB_PATH=<llama.cpp>/build/bin python tools/...

For each prompt: its ids (llama.cpp's tokenizer), 32 greedy ids with end-of-generation tokens suppressed, then
teacher-forced over prompt+generation in one batch (flash attention on) the top-10 logits at every position from
the last prompt token on. llama-cpp-python is never a runtime dependency of fastgguf.
"""
import argparse
import json
import os

import numpy as np


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("model")
    ap.add_argument("out")
    ap.add_argument("--prompts-from", default=os.path.join(os.path.dirname(__file__), "..", "tests", "data",
                                                             "smollm2-q4_1-logits.json"))
    ap.add_argument("--n-gen", type=int, default=32)
    ap.add_argument("--n-ctx", type=int, default=512)
    ap.add_argument("--flash", choices=("on", "off"), default="on")
    ap.add_argument("--no-flash", dest="flash", action="store_const", const="off", help="the same as --flash off")
    ap.add_argument("--stride", type=int, default=0, help="also store every N-th prompt position (long prompts)")
    ap.add_argument("--teacher-from", default=None,
                    help="a reference file whose prompt and greedy ids are used as they are (no generation): the "
                         "same token sequences under other settings, e.g. --flash off")
    ap.add_argument("--engine-note", default="", help="appended to the engine field (which llama.cpp build)")
    a = ap.parse_args()
    import llama_cpp

    prompts = [(r["prompt"], r["parse_special"]) for r in json.load(open(a.prompts_from))["results"]]
    llm = llama_cpp.Llama(model_path=a.model, n_ctx=a.n_ctx, n_batch=a.n_ctx, logits_all=True,
                          flash_attn=a.flash == "on",
                          n_threads=2, verbose=False)
    n_vocab = llm.n_vocab()
    eog = [t for t in range(n_vocab) if llama_cpp.llama_vocab_is_eog(llm._model.vocab, t)]
    results = []
    forced = json.load(open(a.teacher_from))["results"] if a.teacher_from else None
    for k, (text, special) in enumerate(prompts):
        ids = llm.tokenize(text.encode(), add_bos=True, special=special)
        llm.reset()
        gen = []
        if forced is not None:
            assert forced[k]["prompt_ids"] == list(map(int, ids)), "the prompts differ"
            gen = list(forced[k]["greedy_ids"])
        else:
            llm.eval(ids)
        for _ in range(a.n_gen if forced is None else 0):
            logits = np.array(llm.scores[llm.n_tokens - 1], dtype=np.float32)
            logits[eog] = -np.inf
            tok = int(np.argmax(logits))
            gen.append(tok)
            llm.eval([tok])
        llm.reset()
        llm.eval(ids + gen)  # teacher-forced, one batch
        positions = []
        stride = list(range(0, len(ids) - 1, a.stride)) if a.stride else []
        for pos in stride + list(range(len(ids) - 1, len(ids) + len(gen))):
            row = np.array(llm.scores[pos], dtype=np.float32)
            top = np.argsort(-row, kind="stable")[:10]
            positions.append({"pos": pos, "top_ids": [int(t) for t in top],
                              "top_logits": [round(float(row[t]), 4) for t in top]})
        results.append({"prompt": text, "parse_special": special, "prompt_ids": list(map(int, ids)),
                        "greedy_ids": gen, "greedy_text": llm.detokenize(gen).decode("utf-8", "replace"),
                        "positions": positions})
    out = {"model_file": os.path.basename(a.model),
           "engine": f"llama.cpp via llama-cpp-python {llama_cpp.__version__}, flash attention {a.flash}"
                     f"{a.engine_note}",
           "note": "greedy with end-of-generation tokens suppressed; top-10 logits teacher-forced at every "
                   "position from the last prompt token" + (f" and every {a.stride}-th before it" if a.stride else ""),
           "results": results}
    with open(a.out, "w") as f:
        json.dump(out, f, indent=1)


if __name__ == "__main__":
    main()
