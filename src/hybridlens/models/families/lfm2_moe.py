"""LFM2-MoE: LFM2's gated short-convolution layers at `conv` and attention layers at `self_attn`, with sparse
MoE MLPs after the first `num_dense_layers` layers.

As in LFM2, its linear layers keep no recurrent state, only the conv state (the last `conv_L_cache` inputs),
so a linear layer has the site `conv` and no `state`; attention maps its heads with `out_proj`, and the final
norm is `embedding_norm`. The MoE sits in the channel mixer, which no site separates from its layer.
"""

from dataclasses import dataclass

from hybridlens.models.families.base import Family, layer_types


@dataclass(frozen=True)
class Lfm2Moe(Family):
    def toy_fields(self, layout, hidden_size, heads, d_state):
        return dict(
            layer_types=layer_types(layout, {"L": "conv", "A": "full_attention"}),
            num_dense_layers=1,  # one dense MLP, then MoE, so a toy holds both
            num_experts=4,
            num_experts_per_tok=2,
            moe_intermediate_size=hidden_size,
        )


FAMILY = Lfm2Moe(
    "lfm2_moe",
    ("lfm2_moe",),
    "gated short convolution",
    "Lfm2MoeConfig",
    linear="conv",
    final_norm="embedding_norm",
    channels=("conv",),
    output_projection="out_proj",
)
