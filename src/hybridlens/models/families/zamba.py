"""Zamba (v1): multi-head Mamba-1 layers, and hybrid layers in which an attention block runs first and its
output, through the layer's own linear map, is added to the input of that layer's Mamba-1 mixer.

The hybrid layers (kind `parallel`) hold one attention block each, built per layer and tied to the first
one's parameters: the module objects are the layer's own, so hooks act on one layer while the weights are
shared (unlike Zamba2, whose layers call one block object). The block reads the stream concatenated with the
token embeddings, so its heads are `2 * hidden / heads` wide. The Mamba-1 state is per Mamba head and
channel: [batch, mamba_heads, d_inner / mamba_heads, d_state].

As Jamba's, transformers' Zamba mixer continues a cache with the single-step recurrence only for one token; a
longer continuation runs the full-sequence scan from a zero state and drops the cached one. `prepare` makes
each mixer continue token by token inside one call, as Jamba's module does, so hooks on the mixer still see
the whole continuation.
"""

from dataclasses import dataclass

from hybridlens.models.families.base import MAMBA_D_STATE, continue_stepwise, layer_types
from hybridlens.models.families.zamba2 import Zamba2


@dataclass(frozen=True)
class Zamba(Zamba2):
    """Zamba2's layer structure; its blocks are already the layers' own, so only the continuation needs fixing."""

    def prepare(self, model):
        continue_stepwise(self, model)

    def toy_fields(self, layout, hidden_size, heads, d_state):
        return dict(
            layers_block_type=layer_types(layout, {"L": "linear_attention", "P": "hybrid"}),
            num_key_value_heads=heads,
            n_mamba_heads=heads,
            mamba_d_state=d_state or MAMBA_D_STATE,
        )


FAMILY = Zamba(
    "zamba",
    ("zamba",),
    "Mamba-1",
    "ZambaConfig",
    attention="shared_transf",
    final_norm="final_layernorm",
    letters="LP",
)
