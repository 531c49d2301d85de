"""Zamba2: Mamba-2 layers, and hybrid layers in which a *shared* attention block runs before the Mamba-2 mixer.

The hybrid layers (kind `parallel`) all call one attention block (or a few, `num_mem_blocks`), so a hook
on it would fire once per hybrid layer. `prepare` gives each hybrid layer its own view of the block: new
module objects down to the attention's output projection, holding the same parameters, so hooks and head
ablation act on one layer while the weights stay shared. The block reads the stream concatenated with the
token embeddings, so its heads are `2 * hidden / heads` wide.
"""

from dataclasses import dataclass

from hybridlens.models.families.base import MAMBA_D_STATE, Family, layer_types, mamba2_fields


def _own_view(module):
    """A new module object sharing `module`'s parameters and buffers, with its own hooks and children."""
    import collections
    import copy

    view = copy.copy(module)
    for name, value in vars(module).items():
        if name.startswith("_") and name.endswith("hooks") and isinstance(value, dict):
            setattr(view, name, collections.OrderedDict())
    view._modules = {name: _own_view(child) for name, child in module._modules.items()}
    return view


@dataclass(frozen=True)
class Zamba2(Family):
    def prepare(self, model):
        seen = set()
        for layer in model.model.layers:
            shared = getattr(layer, self.attention, None)
            if shared is not None:
                if id(shared) in seen:  # keep the first user's object, give every later one its own
                    setattr(layer, self.attention, _own_view(shared))
                seen.add(id(getattr(layer, self.attention)))

    def linear_mixer(self, layer):
        return getattr(getattr(layer, "mamba_decoder", layer), "mamba", None)

    def attention_module(self, layer):
        block = getattr(layer, self.attention, None)  # the attention block a hybrid layer runs first
        return None if block is None else block.self_attn

    def toy_fields(self, layout, hidden_size, heads, d_state):
        fields = mamba2_fields(hidden_size, heads, d_state)
        return dict(
            layers_block_type=layer_types(layout, {"L": "mamba", "P": "hybrid"}),
            num_key_value_heads=heads,
            n_mamba_heads=heads,
            mamba_d_state=d_state or MAMBA_D_STATE,
            chunk_size=fields["mamba_chunk_size"],
        )


FAMILY = Zamba2(
    "zamba2",
    ("zamba2",),
    "Mamba-2",
    "Zamba2Config",
    attention="shared_transformer",
    final_norm="final_layernorm",
    letters="LP",
)
