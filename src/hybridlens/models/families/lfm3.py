"""LFM3: LFM2's gated short-convolution layers at `conv`, with full and sliding-window attention at `self_attn`.

As in LFM2, a linear layer keeps only its conv state (the last `conv_L_cache` inputs): it has the site `conv`
and no `state`. Its config names two attention types, `full_attention` and `sliding_attention`, which are both
kind `attention`; a toy's attention layers alternate full and sliding (its first full, as in LFM3's own
pattern) with a window shorter than the prompts, so the window is exercised. The attention is Qwen3's, with
`o_proj` taking the heads side by side after a per-head sigmoid gate; `mixer_out` is the mixer's output before
LFM3's post-operator ("sandwich") norm. The final norm is `embedding_norm`.
"""

from dataclasses import dataclass

from hybridlens.models.families.base import Family


@dataclass(frozen=True)
class Lfm3(Family):
    def toy_fields(self, layout, hidden_size, heads, d_state):
        attention = iter(["full_attention", "sliding_attention"] * len(layout))
        return dict(
            layer_types=["conv" if c == "L" else next(attention) for c in layout],
            head_dim=hidden_size // heads,
            sliding_window=8,
        )


FAMILY = Lfm3(
    "lfm3",
    ("lfm3",),
    "gated short convolution",
    "Lfm3Config",
    linear="conv",
    final_norm="embedding_norm",
    channels=("conv",),
)
