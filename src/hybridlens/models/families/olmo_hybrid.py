"""OLMo-Hybrid: Gated DeltaNet layers (negative eigenvalues allowed) and attention layers with post-norms.

Its two layer kinds are two decoder-layer classes; the attention layer normalises after attention and MLP
(OLMo-2 style), which the sites do not see: `mixer_out` is the mixer's output before that norm.
"""

from dataclasses import dataclass

from hybridlens.models.families.base import Family, layer_types


@dataclass(frozen=True)
class OlmoHybrid(Family):
    def toy_fields(self, layout, hidden_size, heads, d_state):
        head_dim = hidden_size // heads
        return dict(
            layer_types=layer_types(layout, {"L": "linear_attention", "A": "full_attention"}),
            linear_key_head_dim=d_state or head_dim,
            linear_value_head_dim=head_dim,
            linear_num_key_heads=heads,
            linear_num_value_heads=heads,
        )


FAMILY = OlmoHybrid("olmo_hybrid", ("olmo_hybrid",), "Gated DeltaNet", "OlmoHybridConfig")
