"""Bailing-Hybrid (Ling 3): Kimi Delta Attention layers and multi-head latent attention (MLA) with a head-wise
sigmoid output gate; the first layers have dense MLPs, the rest MoE.

Both mixers sit at `self_attn` and the class tells them apart. MLA's output projection takes the gated heads'
values side by side, `v_head_dim` wide each, so a head is ablated there after its gate. Unlike Kimi-Linear's
MLA, its KV cache holds the compressed latents, not per-head keys and values: `keys` is the normalised latent
[batch, 1, pos, kv_lora_rank] and `values` the shared rotary key [batch, 1, pos, qk_rope_head_dim], which the
layer expands on every forward; `kv` reads and writes that pair.

The LM head is never tied to the embedding (`_tied_weights_keys` is empty), so the toys say so.
"""

from dataclasses import dataclass

from hybridlens.models.families.base import Family, layer_types


@dataclass(frozen=True)
class BailingHybrid(Family):
    def toy_fields(self, layout, hidden_size, heads, d_state):
        head_dim = hidden_size // heads
        return dict(
            layer_types=layer_types(layout, {"L": "linear_attention", "A": "full_attention"}),
            num_key_value_heads=heads,  # MLA expands its keys to every head; fewer would repeat them again
            head_dim=head_dim,  # the KDA head width (the config then sets head_dim to qk_rope_head_dim)
            qk_rope_head_dim=head_dim // 2,
            qk_nope_head_dim=head_dim // 2,
            v_head_dim=head_dim,
            kv_lora_rank=hidden_size // 2,
            first_k_dense_replace=1,
            num_experts=4,
            num_experts_per_tok=2,
            n_group=2,  # the group-limited router takes the top 2 of each group: 2 experts per group
            topk_group=1,
            moe_intermediate_size=hidden_size,
            tie_word_embeddings=False,
        )


FAMILY = BailingHybrid(
    "bailing_hybrid",
    ("bailing_hybrid",),
    "Kimi Delta Attention",
    "BailingHybridConfig",
    linear="self_attn",
    linear_class="BailingHybridDeltaAttention",
    head_width="v_head_dim",
)
