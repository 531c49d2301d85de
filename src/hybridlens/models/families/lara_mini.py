"""Lara-Mini: Qwen3.5's Gated DeltaNet at `linear_attn`, and two kinds of softmax attention at `self_attn`:
sliding-window layers with rotary embeddings and global layers with none (NoPE); every MLP is a sparse MoE.

Both are kind `attention` (a sliding window is still softmax attention over the keys it keeps). A sliding
layer's cache keeps only the last `sliding_window - 1` keys and values. The toys alternate the two kinds,
sliding first, with a window shorter than the test prompts, so the cache identities are checked past it. The published
checkpoints fuse the DeltaNet's input projections into one `in_proj`; transformers splits it when loading
into Qwen3.5's separate ones, so HLA converts it as it converts Qwen3.5's.
"""

from dataclasses import dataclass

from hybridlens.models.families.base import Family, gated_deltanet_fields


@dataclass(frozen=True)
class LaraMini(Family):
    def toy_fields(self, layout, hidden_size, heads, d_state):
        types, n_attention = [], 0
        for c in layout:
            if c == "A":
                types.append("sliding_attention" if n_attention % 2 == 0 else "full_attention")
                n_attention += 1
            else:
                types.append("linear_attention")
        return gated_deltanet_fields(hidden_size, heads, d_state=d_state) | dict(
            layer_types=types,
            sliding_window=16,
            num_experts=4,
            num_experts_per_tok=2,
            moe_intermediate_size=hidden_size,
            shared_expert_intermediate_size=hidden_size,
        )


FAMILY = LaraMini("lara_mini", ("lara_mini",), "Gated DeltaNet", "LaraMiniConfig", hla=True)
