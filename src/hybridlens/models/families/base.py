"""What the adapter core asks of a family; each family module gives one `Family` (or a subclass of it).

Nothing here imports torch or transformers at import time: the workflow reads the registry when it parses.
"""

from dataclasses import dataclass

# Toy layout letters and the layer kind each builds.
LETTERS = {"L": "linear", "A": "attention", "P": "parallel", "F": "mlp"}


@dataclass(frozen=True)
class Family:
    """One hybrid family: how to find its mixers, its final norm, its logit scale, its cache channels, its toys.

    The defaults fit a decoder layer that holds its linear mixer at `linear` and softmax attention at
    `attention` (one or the other, or both for a parallel layer), a base model at `model.model` with the
    final norm at `final_norm`, attention whose `o_proj` takes the heads side by side, and a unified
    `DynamicCache` whose linear layers keep `conv_states[0]` and `recurrent_states[0]`.
    """

    name: str
    model_types: tuple[str, ...]
    mixer: str  # what its linear layers are, in words (the README's family table)
    config_class: str  # the transformers config class its toys are built from
    linear: str = "linear_attn"  # decoder-layer attribute of the linear mixer
    attention: str = "self_attn"  # decoder-layer attribute of softmax attention
    final_norm: str = "norm"  # attribute of the base model
    hla: bool = False  # its linear mixers are Qwen3.5's Gated DeltaNet, which HLA converts
    channels: tuple[str, ...] = ("state", "conv")  # the cache sites of one linear layer
    letters: str = "LA"  # toy layout letters it accepts (LETTERS)
    output_projection: str = "o_proj"  # attribute of attention that maps the heads, side by side, to the stream
    head_width: str = "head_dim"  # attribute of attention: how wide one head is at that projection's input
    linear_class: str | None = None  # where both mixers share one attribute: the linear one's class name
    # Its left-padded forward (with the attention mask) equals the unpadded one at every real position, so
    # prompts of different lengths share a batch (the property suite checks it); False: batches of one length.
    left_padding: bool = True

    # --- the model -------------------------------------------------------------------------------
    def base_model(self, model):
        """The decoder stack: `layers`, the final norm, the embedding."""
        return model.model

    def prepare(self, model) -> None:
        """Called whenever the adapter wraps a model, before it looks at any layer; a model may be wrapped
        more than once (the zoo's validator, then the experiment), so it must be idempotent."""

    def linear_mixer(self, layer):
        """The layer's linear (recurrent, state-space or convolutional) mixer, or None."""
        mixer = getattr(layer, self.linear, None)
        return mixer if self.linear_class in (None, type(mixer).__name__) else None

    def attention_module(self, layer):
        """The layer's softmax attention, or None."""
        mixer = getattr(layer, self.attention, None)
        return None if self.linear_class is not None and type(mixer).__name__ == self.linear_class else mixer

    def ffn(self, layer):
        """The channel mixer of a layer that has no token mixer (kind `mlp`), or None."""
        return None

    def head_mixer(self, attn):
        """(output projection, n_heads, head_dim): the projection's input holds the heads side by side."""
        proj, width = getattr(attn, self.output_projection), getattr(attn, self.head_width)
        return proj, proj.in_features // width, width

    def logit_scale(self, config) -> float:
        """What the LM head's logits are multiplied by after the unembedding (the logit lens applies it too)."""
        return 1.0

    def layer_kinds(self, config) -> list[str]:
        """The kind of each layer as the config's layer pattern says (the property suite checks the modules)."""
        kinds = {"linear_attention": "linear", "mamba": "linear", "conv": "linear", "full_attention": "attention"}
        kinds |= {"attention": "attention", "sliding_attention": "attention", "hybrid": "parallel"}
        kinds |= {"mlp": "mlp", "moe": "mlp"}
        return [kinds[t] for t in config.layer_types]

    # --- toys ------------------------------------------------------------------------------------
    def toy_config(
        self,
        vocab_size: int,
        hidden_size: int,
        layout: str,
        heads: int = 4,
        d_state: int | None = None,
        positions: str = "rope",
    ):
        """A small config of this family's real transformers class.

        layout: one letter per layer, L = linear, A = attention, P = parallel (both in one layer), F = a layer
        with only an MLP; each family accepts the letters its architecture has.
        d_state: how many keys a linear head's state is indexed by (Mamba's state size, Gated DeltaNet's key
        head width); None = the family's toy default.
        positions: `rope`, or `none` for attention without a positional encoding (toy_without_positions).
        """
        if not layout or set(layout) - set(self.letters):
            raise ValueError(f"toy layout {layout!r} for family {self.name}: use only the letters {self.letters!r}")
        import transformers

        common = dict(
            vocab_size=vocab_size,
            hidden_size=hidden_size,
            intermediate_size=2 * hidden_size,
            num_hidden_layers=len(layout),
            num_attention_heads=heads,
            num_key_value_heads=max(1, heads // 2),
            max_position_embeddings=2048,
            pad_token_id=0,
            bos_token_id=None,
            eos_token_id=2,
            tie_word_embeddings=True,
        )
        fields = self.toy_fields(layout, hidden_size, heads, d_state)
        if d_state is not None and not any(fields.get(k) == d_state for k in STATE_FIELDS):
            raise ValueError(
                f"toy state_size {d_state} for family {self.name}: its toys have no state size to set; leave it out"
            )
        if positions == "none":
            fields |= self.toy_without_positions()
        return getattr(transformers, self.config_class)(**(common | fields))

    def toy_fields(self, layout: str, hidden_size: int, heads: int, d_state: int) -> dict:
        """The config fields that make `layout` in this family (and override any of the common ones)."""
        raise NotImplementedError

    def toy_without_positions(self) -> dict:
        """Config fields for attention without a positional encoding, where the family's class has them: then
        only the linear layers tell attention where a token is, as in Granite-4.0-H."""
        raise ValueError(
            f"toy positions none for family {self.name}: its class always rotates attention's queries and keys; "
            "leave positions out"
        )

    def init_toy(self, model) -> None:
        """Family-specific fixes to transformers' initialisation of a freshly built toy model."""

    def toy_forward_kwargs(self, model) -> dict:
        """Extra forward arguments that make training a toy cheaper without changing its outputs."""
        return {}


def layer_types(layout: str, names: dict) -> list[str]:
    """A config's layer_types list from a toy layout, given each letter's name in that config."""
    return [names[c] for c in layout]


def gated_deltanet_fields(
    hidden_size: int, heads: int, key_heads: int | None = None, d_state: int | None = None
) -> dict:
    """The Gated DeltaNet and attention head sizes of a toy, in the field names the Qwen3.5 lineage shares."""
    head_dim = hidden_size // heads
    return dict(
        head_dim=head_dim,
        linear_key_head_dim=d_state or head_dim,
        linear_value_head_dim=head_dim,
        linear_num_key_heads=key_heads or max(1, heads // 2),
        linear_num_value_heads=heads,
    )


MAMBA_D_STATE = 16  # the toys' Mamba state size unless a toy spec sets state_size
STATE_FIELDS = ("linear_key_head_dim", "mamba_d_state", "ssm_state_size")  # where a toy's state size goes


def mamba2_fields(hidden_size: int, heads: int, d_state: int | None) -> dict:
    """The Mamba-2 sizes of a toy, in the field names Granite, Bamba and Falcon-H1 share."""
    return dict(
        mamba_n_heads=heads,
        mamba_d_head=2 * hidden_size // heads,
        mamba_d_state=d_state or MAMBA_D_STATE,
        # The plain-PyTorch Mamba-2 scan pads each sequence to whole chunks: the toys' short prompts waste less at 32.
        mamba_chunk_size=32,
    )


def silence_mamba_norm(family: Family, model) -> None:
    """Start every Mamba-2 branch silent with a zero gain on its gated RMSNorm.

    The mixer applies that norm *after* the gate, so at initialisation every Mamba layer would write unit-RMS
    noise into the residual stream that drowns the token embedding and keeps attention from learning to copy a
    value; a zero gain starts the branch silent, as Qwen3.5's mixers effectively start.
    """
    for layer in family.base_model(model).layers:
        mixer = family.linear_mixer(layer)
        if mixer is not None:
            mixer.norm.weight.data.zero_()


class _Stepwise:
    """A Mamba-1 mixer (Jamba's, Zamba's) that continues a filled cache one token at a time."""

    def forward(self, hidden_states, cache=None, attention_mask=None, **kwargs):
        import torch

        n = hidden_states.shape[1]
        if cache is None or n == 1 or cache.get_recurrent_state(self.layer_idx, state_idx=0) is None:
            return super().forward(hidden_states, cache=cache, attention_mask=attention_mask, **kwargs)
        mask = None if attention_mask is None else attention_mask[:, -n:]
        steps = [
            super(_Stepwise, self).forward(
                hidden_states[:, i : i + 1], cache=cache, attention_mask=None if mask is None else mask[:, i : i + 1]
            )
            for i in range(n)
        ]
        return torch.cat(steps, 1)


def continue_stepwise(family: Family, model) -> None:
    """Make every linear mixer continue a filled cache one token at a time, inside one call (so hooks on the
    mixer still see the whole continuation), for mixers that drop the cached state otherwise."""
    for layer in family.base_model(model).layers:
        mixer = family.linear_mixer(layer)
        if mixer is not None and not isinstance(mixer, _Stepwise):
            mixer.__class__ = type(f"Stepwise{type(mixer).__name__}", (_Stepwise, type(mixer)), {})
