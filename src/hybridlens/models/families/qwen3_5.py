"""Qwen3.5 (dense): Gated DeltaNet layers at `linear_attn`, gated softmax attention at `self_attn`.

The published checkpoints are vision-language models: the text stack sits at `model.language_model`.
"""

from dataclasses import dataclass

from hybridlens.models.families.base import Family, gated_deltanet_fields, layer_types


@dataclass(frozen=True)
class Qwen35(Family):
    def base_model(self, model):
        return getattr(model.model, "language_model", model.model)

    def toy_fields(self, layout, hidden_size, heads, d_state):
        types = layer_types(layout, {"L": "linear_attention", "A": "full_attention"})
        return gated_deltanet_fields(hidden_size, heads, d_state=d_state) | {"layer_types": types}

    def toy_forward_kwargs(self, model):
        """transformers' plain-PyTorch Gated DeltaNet pads every sequence to 64-token chunks, so on the toys'
        short prompts 16-token chunks do the same arithmetic on less padding. Only on CPU, where that scan
        always runs; on CUDA transformers may call fla's kernel, which chunks on its own."""
        return {"chunk_size": 16} if model.device.type == "cpu" else {}


FAMILY = Qwen35("qwen3_5", ("qwen3_5", "qwen3_5_text"), "Gated DeltaNet", "Qwen3_5TextConfig", hla=True)
