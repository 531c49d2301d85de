"""Qwen3.5-35B-A3B: Qwen3.5's decoder layers with a sparse MoE block (routed + shared experts) as the MLP."""

from dataclasses import dataclass

from hybridlens.models.families.qwen3_5 import Qwen35


@dataclass(frozen=True)
class Qwen35Moe(Qwen35):
    def toy_fields(self, layout, hidden_size, heads, d_state):
        moe = dict(num_experts=4, num_experts_per_tok=2, moe_intermediate_size=hidden_size)
        return (
            super().toy_fields(layout, hidden_size, heads, d_state)
            | moe
            | {"shared_expert_intermediate_size": hidden_size}
        )


FAMILY = Qwen35Moe(
    "qwen3_5_moe", ("qwen3_5_moe", "qwen3_5_moe_text"), "Gated DeltaNet", "Qwen3_5MoeTextConfig", hla=True
)
