"""Jamba: Mamba-1 layers at `mamba` and attention layers at `self_attn`, every second MLP an MoE.

Mamba-1 keeps one state per channel: `state` is [batch, d_inner, d_state], not per head. The config
places attention by period and offset, so a toy layout must repeat one period with one attention layer.

transformers' Jamba continues a cache with the single-step recurrence only for one token; a longer
continuation runs the full-sequence scan from a zero state and drops the cached one. `prepare` makes each
Mamba-1 mixer continue token by token instead, inside one call, so hooks on the mixer still see the whole
continuation.
"""

from dataclasses import dataclass

from hybridlens.models.families.base import MAMBA_D_STATE, Family, continue_stepwise


@dataclass(frozen=True)
class Jamba(Family):
    def prepare(self, model):
        continue_stepwise(self, model)

    def toy_fields(self, layout, hidden_size, heads, d_state):
        period = next(p for p in range(1, len(layout) + 1) if all(c == layout[i % p] for i, c in enumerate(layout)))
        if layout[:period].count("A") != 1 or len(layout) % period:
            raise ValueError(
                f"toy layout {layout!r} for family jamba: it must repeat one period with one A (e.g. 'LLALLA')"
            )
        return dict(
            attn_layer_period=period,
            attn_layer_offset=layout.index("A"),
            num_experts=2,
            expert_layer_period=2,
            expert_layer_offset=1,
            mamba_d_state=d_state or MAMBA_D_STATE,
            mamba_dt_rank=max(1, hidden_size // 16),
        )


FAMILY = Jamba("jamba", ("jamba",), "Mamba-1", "JambaConfig", linear="mamba", final_norm="final_layernorm")
