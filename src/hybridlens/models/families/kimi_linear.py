"""Kimi-Linear: Kimi Delta Attention (a per-channel-gated delta rule) and multi-head latent attention (MLA).

Both mixers sit at `self_attn`; the class tells them apart. MLA's output projection takes the heads'
values side by side, `v_head_dim` wide each. Its KV cache holds the expanded keys and values per head.
"""

from dataclasses import dataclass

from hybridlens.models.families.base import Family, layer_types


@dataclass(frozen=True)
class KimiLinear(Family):
    def toy_fields(self, layout, hidden_size, heads, d_state):
        head_dim = hidden_size // heads
        return dict(
            layer_types=layer_types(layout, {"L": "linear_attention", "A": "full_attention"}),
            num_key_value_heads=heads,
            linear_head_dim=head_dim,
            linear_num_heads=heads,
            kv_lora_rank=hidden_size // 2,
            qk_rope_head_dim=head_dim // 2,
            qk_nope_head_dim=head_dim // 2,
            v_head_dim=head_dim,
            head_dim=head_dim // 2,
            num_experts=4,
            num_experts_per_token=2,
            moe_intermediate_size=hidden_size,
        )


FAMILY = KimiLinear(
    "kimi_linear",
    ("kimi_linear",),
    "Kimi Delta Attention",
    "KimiLinearConfig",
    linear="self_attn",
    linear_class="KimiLinearDeltaAttention",
    head_width="v_head_dim",
)
