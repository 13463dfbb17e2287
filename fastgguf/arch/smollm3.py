"""smollm3 (SmolLM3): the llama layout (normal RoPE, pairs (2i, 2i+1); optional q/k/v biases; tied or untied output)
whose every 4th layer has no position encoding: in layers il with (il + 1) % 4 == 0 (3, 7, 11, ...) q and k are not
rotated (NoPE).

Facts from llama.cpp (src/models/smollm3.cpp): the step is hparams.n_no_rope_layer_step, set to 4 there and read
from no key (the converter writes none either: Hugging Face's no_rope_layers list is not carried into the GGUF), so
a file cannot change it and any smollm3.* key of that name is ignored, as there. No attention.scale is read (scores
times 1/sqrt(head_dim))."""
import dataclasses

from fastgguf.arch.base import Arch, register


@register
class SmolLM3(Arch):
    name = "smollm3"
    no_rope_layer_step = 4   # llama.cpp's n_no_rope_layer_step, fixed for this architecture

    def hparams(self):
        hp = self.base_hparams()
        step = self.no_rope_layer_step
        return dataclasses.replace(hp, nope_layers=tuple(i for i in range(hp.n_layer) if (i + 1) % step == 0))
