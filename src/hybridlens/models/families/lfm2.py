"""LFM2: gated short-convolution layers at `conv` and attention layers at `self_attn`.

Its linear layers keep no recurrent state: their whole memory is the conv state, the last `conv_L_cache`
inputs, so a linear layer has the site `conv` and no `state`. The final norm is `embedding_norm`.
"""

from dataclasses import dataclass

from hybridlens.models.families.base import Family, layer_types


@dataclass(frozen=True)
class Lfm2(Family):
    def toy_fields(self, layout, hidden_size, heads, d_state):
        return dict(
            layer_types=layer_types(layout, {"L": "conv", "A": "full_attention"}),
            block_auto_adjust_ff_dim=False,  # otherwise the MLP is rounded up to a multiple of 256
        )


FAMILY = Lfm2(
    "lfm2",
    ("lfm2",),
    "gated short convolution",
    "Lfm2Config",
    linear="conv",
    final_norm="embedding_norm",
    channels=("conv",),
    output_projection="out_proj",
)
