"""Granite-4.0-H: Mamba-2 layers at `mamba`, attention layers at `self_attn`, MoE or dense MLPs.

Its logits are divided by `logits_scaling` after the unembedding.
"""

from dataclasses import dataclass

from hybridlens.models.families.base import Family, layer_types, mamba2_fields, silence_mamba_norm


@dataclass(frozen=True)
class Granite(Family):
    def logit_scale(self, config):
        return 1.0 / config.logits_scaling

    def toy_fields(self, layout, hidden_size, heads, d_state):
        return mamba2_fields(hidden_size, heads, d_state) | dict(
            layer_types=layer_types(layout, {"L": "mamba", "A": "attention"}),
            num_local_experts=0,
            shared_intermediate_size=2 * hidden_size,
            position_embedding_type="rope",
            attention_multiplier=(hidden_size // heads) ** -0.5,  # Granite's default 1.0 saturates toy attention
        )

    def toy_without_positions(self):
        return dict(position_embedding_type="nope")

    def init_toy(self, model):
        silence_mamba_norm(self, model)


FAMILY = Granite("granitemoehybrid", ("granitemoehybrid",), "Mamba-2", "GraniteMoeHybridConfig", linear="mamba")
