"""The toy zoo: tiny models of the real architectures, and the word-level tokenizer they share.

build_tokenizer   word-level tokenizer over the task vocabulary, as a transformers fast tokenizer
build_toy_model   a randomly initialised model of a family's real transformers class
"""

import math

import torch

from hybridlens.models.families import FAMILIES
from hybridlens.tasks.vocab import KEYS, NEUTRAL, PERSONAS, fused_words, key_words, language_forms

SPECIALS = ["<pad>", "<unk>", "<eos>"]


def toy_vocabulary(n_languages: int, n_keys: int | None = None, fused: bool = False) -> list[str]:
    """The toy tokenizer's words; keys beyond KEYS (n_keys) and the fused words (only for toys trained on
    a fused format) come last, so every other word keeps its id."""
    words = list(SPECIALS) + list(NEUTRAL) + list(KEYS) + list(PERSONAS) + list(PERSONAS.values())
    for table in language_forms(n_languages):
        words += table.values()
    words += key_words(n_keys)
    return list(dict.fromkeys(words + (list(fused_words(n_languages)) if fused else [])))


def build_tokenizer(n_languages: int = 2, n_keys: int | None = None, fused: bool = False):
    """Every task word is exactly one token; text is split on whitespace, so offsets are exact."""
    from tokenizers import Tokenizer, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    vocab = {w: i for i, w in enumerate(toy_vocabulary(n_languages, n_keys, fused))}
    tok = Tokenizer(models.WordLevel(vocab, unk_token="<unk>"))
    tok.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    return PreTrainedTokenizerFast(tokenizer_object=tok, pad_token="<pad>", unk_token="<unk>", eos_token="<eos>")


def build_toy_model(
    family: str,
    vocab_size: int,
    hidden_size: int,
    layout: str,
    heads: int = 4,
    seed: int = 0,
    state_size=None,
    positions: str = "rope",
):
    """A fresh model of `family`'s real CausalLM class with the given toy dimensions; `state_size` is the
    linear heads' key width (Family.toy_config's d_state), None = the family's default; `positions` as in
    Family.toy_config."""
    from transformers import AutoModelForCausalLM

    if family not in FAMILIES:
        raise ValueError(f"unknown family {family!r}; use one of {sorted(FAMILIES)}")
    config = FAMILIES[family].toy_config(vocab_size, hidden_size, layout, heads, state_size, positions)
    torch.manual_seed(seed)
    model = AutoModelForCausalLM.from_config(config, attn_implementation="eager", dtype=torch.float32)
    init_time_steps(model, seed)
    init_convolutions(model)
    FAMILIES[family].init_toy(model)
    return model


@torch.no_grad()
def init_convolutions(model):
    """PyTorch's default init for the linear mixers' short convolutions, as mamba_ssm and fla leave them.

    transformers draws them from N(0, 0.02): Mamba-2's x, B and C all pass through the conv, so its
    state read-out starts far below the D skip and gets almost no gradient, and a toy stays at chance.
    """
    for module in model.modules():
        if isinstance(module, torch.nn.Conv1d):
            module.reset_parameters()


@torch.no_grad()
def init_time_steps(model, seed: int = 0, dt_min: float = 1e-3, dt_max: float = 1e-1):
    """Set every linear mixer's `dt_bias` so softplus(dt_bias) = dt, dt log-uniform in [dt_min, dt_max].

    This is the Mamba / Gated DeltaNet papers' initialisation (fla and mamba_ssm use it). transformers'
    `_init_weights` sets dt_bias = 1 instead, so every head forgets within a few tokens and a toy sits at
    chance for long before any binding forms.
    """
    gen = torch.Generator().manual_seed(seed)
    for name, param in model.named_parameters():
        if name.endswith("dt_bias"):
            log_dt = torch.rand(param.shape, generator=gen) * (math.log(dt_max) - math.log(dt_min)) + math.log(dt_min)
            dt = torch.exp(log_dt)
            param.copy_(dt + torch.log(-torch.expm1(-dt)))  # inverse softplus


@torch.no_grad()
def share_embedding(model, seed: int, dim: int):
    """Freeze the token embedding to rows of one seeded random [vocab, dim] matrix, written into the model's
    width through a fixed orthonormal map of its own.

    Toys built with the same (seed, dim) then embed every token, held-out keys included, as exact linear
    images of each other, which toys trained apart never do; stitching maps fitted on some keys can carry
    the others. Rows have unit norm: tied toys freeze their unembedding with it, and at transformers'
    N(0, 0.02) scale the frozen logits are too flat for a toy to bind keys to values in reasonable time.
    """
    weight = model.get_input_embeddings().weight
    vocab, hidden = weight.shape
    if dim > hidden:
        raise ValueError(f"shared embedding width {dim} exceeds the toy's hidden_size {hidden}; use dim <= {hidden}")
    shared = torch.randn(vocab, dim, generator=torch.Generator().manual_seed(seed)) / math.sqrt(dim)
    own = torch.linalg.qr(torch.randn(hidden, dim, generator=torch.Generator().manual_seed(seed + hidden)))[0]
    weight.copy_(shared @ own.T)
    weight.requires_grad_(False)
