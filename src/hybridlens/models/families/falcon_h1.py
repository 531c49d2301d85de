"""Falcon-H1: every layer is parallel, Mamba-2 at `mamba` and attention at `self_attn` reading the same input.

Its logits are multiplied by `lm_head_multiplier`; `mixer_out` is the Mamba-2 output before Falcon-H1's
own output multipliers.
"""

from dataclasses import dataclass

from hybridlens.models.families.base import Family, mamba2_fields, silence_mamba_norm


@dataclass(frozen=True)
class FalconH1(Family):
    def logit_scale(self, config):
        return config.lm_head_multiplier

    def layer_kinds(self, config):
        return ["parallel"] * config.num_hidden_layers

    def toy_fields(self, layout, hidden_size, heads, d_state):
        # The Mamba-2 RMSNorm (after the gate, as in Granite; a FalconH1Config option, off by default) is
        # turned on so that init_toy can start the Mamba-2 branch silent, which a toy needs to bind keys to values.
        return mamba2_fields(hidden_size, heads, d_state) | dict(
            mamba_d_ssm=2 * hidden_size, mamba_rms_norm=True, mamba_norm_before_gate=False
        )

    def init_toy(self, model):
        silence_mamba_norm(self, model)


FAMILY = FalconH1(
    "falcon_h1", ("falcon_h1",), "Mamba-2", "FalconH1Config", linear="mamba", final_norm="final_layernorm", letters="P"
)
