"""Qwen3-Next: Gated DeltaNet with fused q/k/v/z and b/a projections, gated attention, sparse MoE MLPs.

HLA does not convert it: its Gated DeltaNet keeps the projections fused (`in_proj_qkvz`, `in_proj_ba`),
where Qwen3.5's, which HLA reads, keeps them apart.
"""

from dataclasses import dataclass

from hybridlens.models.families.base import Family, gated_deltanet_fields, layer_types


@dataclass(frozen=True)
class Qwen3Next(Family):
    def toy_fields(self, layout, hidden_size, heads, d_state):
        return gated_deltanet_fields(hidden_size, heads, d_state=d_state) | dict(
            layer_types=layer_types(layout, {"L": "linear_attention", "A": "full_attention"}),
            num_experts=4,
            num_experts_per_tok=2,
            moe_intermediate_size=hidden_size,
            shared_expert_intermediate_size=hidden_size,
        )


FAMILY = Qwen3Next("qwen3_next", ("qwen3_next",), "Gated DeltaNet", "Qwen3NextConfig")
