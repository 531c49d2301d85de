"""Bamba: Mamba-2 layers at `mamba` and attention layers at `self_attn` (the layers listed in
`attn_layer_indices`), with the final norm at `final_layernorm`."""

from dataclasses import dataclass

from hybridlens.models.families.base import Family, mamba2_fields


@dataclass(frozen=True)
class Bamba(Family):
    def toy_fields(self, layout, hidden_size, heads, d_state):
        attention = [i for i, c in enumerate(layout) if c == "A"]
        return mamba2_fields(hidden_size, heads, d_state) | {"attn_layer_indices": attention}


FAMILY = Bamba("bamba", ("bamba",), "Mamba-2", "BambaConfig", linear="mamba", final_norm="final_layernorm")
