"""The model families hybridlens knows, without importing torch (the workflow reads them when it parses).

Family          what the adapter needs of one family: mixer attributes, final norm, logit scale, toy config
FAMILIES        name -> Family
family_of       a checkpoint's model_type -> its Family (UnsupportedModel for any other)
check_family    the same, refusing a registry `family` that names another one
"""

from dataclasses import dataclass

from hybridlens.errors import UserError


class UnsupportedModel(UserError, ValueError):
    """A model hybridlens cannot analyse (unknown family, or no linear layers)."""


@dataclass(frozen=True)
class Family:
    name: str
    model_types: tuple[str, ...]
    linear: str  # decoder-layer attribute of the linear mixer (GDN or Mamba-2)
    attention: str  # decoder-layer attribute of softmax attention
    final_norm: str  # attribute of the base model
    hla: bool = False  # its linear mixers are Gated DeltaNet, which HLA can convert
    toy: bool = True  # the toy zoo can build a model of it (toy_config below)

    def toy_config(self, vocab_size: int, hidden_size: int, layout: str, heads: int = 4, d_state: int = 16):
        """A small config of this family's real transformers class.

        layout: one letter per layer, L = linear, A = attention, P = parallel (Falcon-H1 only).
        """
        if not self.toy:
            toys = [f for f, fam in FAMILIES.items() if fam.toy]
            raise ValueError(f"family {self.name} has no toy model; toys are of the families {toys}")
        allowed = "P" if self.name == "falcon_h1" else "LA"
        if not layout or set(layout) - set(allowed):
            raise ValueError(f"toy layout {layout!r} for family {self.name}: use only the letters {allowed!r}")
        from transformers import FalconH1Config, GraniteMoeHybridConfig, Qwen3_5TextConfig

        head_dim, n = hidden_size // heads, len(layout)
        common = dict(
            vocab_size=vocab_size,
            hidden_size=hidden_size,
            intermediate_size=2 * hidden_size,
            num_hidden_layers=n,
            num_attention_heads=heads,
            num_key_value_heads=max(1, heads // 2),
            max_position_embeddings=2048,
            pad_token_id=0,
            bos_token_id=None,
            eos_token_id=2,
            tie_word_embeddings=True,
        )
        if self.name == "qwen3_5":
            return Qwen3_5TextConfig(
                **common,
                head_dim=head_dim,
                layer_types=["linear_attention" if c == "L" else "full_attention" for c in layout],
                linear_key_head_dim=head_dim,
                linear_value_head_dim=head_dim,
                linear_num_key_heads=max(1, heads // 2),
                linear_num_value_heads=heads,
            )
        mamba = dict(
            mamba_n_heads=heads,
            mamba_d_head=2 * hidden_size // heads,
            mamba_d_state=d_state,
            # The plain-PyTorch Mamba-2 scan pads each sequence to whole chunks; the toys' 20-90-token
            # prompts waste less at 32 (measured: a Falcon-H1 toy's training step 0.29 -> 0.18 s at 96 tokens).
            mamba_chunk_size=32,
        )
        if self.name == "granitemoehybrid":
            return GraniteMoeHybridConfig(
                **common,
                **mamba,
                layer_types=["mamba" if c == "L" else "attention" for c in layout],
                num_local_experts=0,
                shared_intermediate_size=2 * hidden_size,
                position_embedding_type="rope",
                attention_multiplier=head_dim**-0.5,  # Granite's default 1.0 saturates toy attention
            )
        # With its Mamba-2 RMSNorm on (after the gate, as in Granite; a FalconH1Config option, off by
        # default) and started silent by init_toy, a Falcon-H1 toy can bind keys to values (seed 0 after
        # ~2300 steps); without it none we tried did within 2000-3000 steps (see docs/zoo.md).
        return FalconH1Config(
            **common, **mamba, mamba_d_ssm=2 * hidden_size, mamba_rms_norm=True, mamba_norm_before_gate=False
        )

    def init_toy(self, model):
        """Family-specific fixes to transformers' initialisation of a freshly built toy model.

        Granite's Mamba-2 mixer applies its RMSNorm *after* the gate, so at initialisation every
        Mamba layer writes unit-RMS noise into the residual stream: measured on a hidden-48 toy,
        norm 1.3 per layer against 0.14 for the token embedding. The attention layers then never
        learn to copy a value (at chance after 800 steps). A zero norm gain starts the branch
        silent, as Qwen3.5's mixers effectively start, and it learns to copy within ~400 steps.
        The Falcon-H1 toy's Mamba-2 gets the same norm (see toy_config) and the same silent start.
        """
        if self.name in ("granitemoehybrid", "falcon_h1"):
            for layer in model.model.layers:
                if getattr(layer, self.linear, None) is not None:
                    getattr(layer, self.linear).norm.weight.data.zero_()

    def toy_forward_kwargs(self, model) -> dict:
        """Extra forward arguments that make training a toy cheaper without changing its outputs.

        transformers' plain-PyTorch Gated DeltaNet pads every sequence to 64-token chunks; the toys'
        prompts are 20-90 tokens, so 16-token chunks do the same arithmetic on less padding (measured,
        8-layer toy: a training step 0.75 -> 0.52 s at 84 tokens, 0.35 -> 0.19 s at 32). Only on CPU,
        where that scan always runs; on CUDA transformers may call fla's kernel, which chunks on its own.
        """
        if self.name == "qwen3_5" and model.device.type == "cpu":
            return {"chunk_size": 16}
        return {}

    def logit_scale(self, config) -> float:
        if self.name == "granitemoehybrid":
            return 1.0 / config.logits_scaling
        if self.name == "falcon_h1":
            return config.lm_head_multiplier
        return 1.0


FAMILIES = {
    f.name: f
    for f in (
        Family("qwen3_5", ("qwen3_5", "qwen3_5_text"), "linear_attn", "self_attn", "norm", hla=True),
        # Qwen3.5-35B-A3B: the same decoder layers with a sparse MoE block (routed + shared experts) as MLP.
        Family(
            "qwen3_5_moe", ("qwen3_5_moe", "qwen3_5_moe_text"), "linear_attn", "self_attn", "norm", hla=True, toy=False
        ),
        Family("granitemoehybrid", ("granitemoehybrid",), "mamba", "self_attn", "norm"),
        Family("falcon_h1", ("falcon_h1",), "mamba", "self_attn", "final_layernorm"),
    )
}


def family_of(model_type: str, source="") -> Family:
    for fam in FAMILIES.values():
        if model_type in fam.model_types:
            return fam
    known = ", ".join(t for f in FAMILIES.values() for t in f.model_types)
    raise UnsupportedModel(
        f"{f'{source}: ' if source else ''}model_type {model_type!r} is not a hybrid family hybridlens knows "
        f"({known}); add a Family to hybridlens/models/families.py"
    )


def check_family(model_type: str, family: str | None, source="") -> Family:
    """The family of a checkpoint's model_type; refuses a registry `family` that names another one."""
    fam = family_of(model_type, source)
    if family is not None and family != fam.name:
        raise UnsupportedModel(
            f"{source}: the registry says family {family!r}, but the checkpoint's model_type {model_type!r} is "
            f"family {fam.name!r}; set family: {fam.name}"
        )
    return fam
