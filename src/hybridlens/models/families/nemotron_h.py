"""Nemotron-H: one mixer per block, at `mixer` — Mamba-2, attention, an MLP or an MoE, as the pattern string
(`hybrid_override_pattern`, "M" Mamba-2, "*" attention, "-" MLP, "E" MoE) or `layers_block_type` says.

A block with only an MLP has kind `mlp`: it ends no group (the linear layers on either side of it are one
group) and its `mixer_out` is that MLP's output. The final norm is `norm_f`, the embedding `embeddings`.
"""

from dataclasses import dataclass

from hybridlens.models.families.base import MAMBA_D_STATE, Family, layer_types, silence_mamba_norm


@dataclass(frozen=True)
class NemotronH(Family):
    def _mixer(self, layer, kind):
        name = type(layer.mixer).__name__
        return layer.mixer if name.endswith(kind) else None

    def linear_mixer(self, layer):
        return self._mixer(layer, "Mamba2Mixer")

    def attention_module(self, layer):
        return self._mixer(layer, "Attention")

    def ffn(self, layer):
        return layer.mixer if self.linear_mixer(layer) is None and self.attention_module(layer) is None else None

    def toy_fields(self, layout, hidden_size, heads, d_state):
        names = {"L": "mamba", "A": "attention", "F": "mlp"}
        return dict(
            layers_block_type=layer_types(layout, names),
            head_dim=hidden_size // heads,
            mamba_num_heads=heads,
            mamba_head_dim=2 * hidden_size // heads,
            ssm_state_size=d_state or MAMBA_D_STATE,
            n_groups=1,
            chunk_size=32,  # as mamba2_fields: less padding in the plain-PyTorch scan
        )

    def init_toy(self, model):
        silence_mamba_norm(self, model)


FAMILY = NemotronH("nemotron_h", ("nemotron_h",), "Mamba-2", "NemotronHConfig", final_norm="norm_f", letters="LAF")
