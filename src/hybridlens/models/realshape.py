"""Real-shape checkpoints: random weights with a published model's structure, saved as the hub stores them.

No weights can be downloaded here, but the published `config.json` files and chat templates can be kept
(`config/real-configs/`). A real-shape checkpoint keeps every structural feature of the published model —
its `architectures` class and weight names (the multimodal Qwen3.5 wrapper with a small vision tower),
the layer-type pattern, head counts and head dimensions, output gates, rotary settings, tying, routed and
shared experts, multipliers — and scales down only depth (by whole periods of the layer pattern), width,
vocabulary and expert count. It is written as sharded safetensors with an index, `config.json`,
`generation_config.json` and a byte-level BPE tokenizer that carries the real chat template and its special
tokens: one trained here on the task text, or Qwen's real one (`--tokenizer qwen`, models.real_tokenizer).
Random weights exercise every code path except the science.

realshape_config   the scaled-down config dict of a published config
build_tokenizer    a BPE trained here on the task text and some English, with a template's special tokens
build_realshape    config file -> random-weight checkpoint directory (and the in-memory model)

    python -m hybridlens.models.realshape CONFIG OUT_DIR [--layers N] [--hidden H] [--vocab V] [--experts E]
        [--tokenizer trained|qwen]
"""

import argparse
import copy
import json
import math
import re
from pathlib import Path

import torch

from hybridlens.store import save_checkpoint

REAL_CONFIGS = Path(__file__).resolve().parents[3] / "config" / "real-configs"

# Chat template and special-token roles of each publisher (the config file name starts with the hub org).
# The roles follow the published tokenizers: Qwen ends an assistant turn with <|im_end|> while its config's
# eos is <|endoftext|>; Falcon-H1's template opens with the bos token.
PUBLISHERS = {
    "Qwen": {
        "template": "Qwen3.5.chat_template.jinja",
        "tokens": {"eos": "<|im_end|>", "pad": "<|endoftext|>"},
        "config_eos": "<|endoftext|>",
    },
    "ibm-granite": {
        "template": "ibm-granite__granite-4.0-h.chat_template.jinja",
        "tokens": {"bos": "<|end_of_text|>", "eos": "<|end_of_text|>", "pad": "<|pad|>"},
    },
    "tiiuae": {
        "template": "tiiuae__Falcon-H1.chat_template.jinja",
        "tokens": {"bos": "<|begin_of_text|>", "eos": "<|end_of_text|>", "pad": "<|pad|>"},
    },
    "nvidia": {"template": None, "tokens": {"bos": "<s>", "eos": "</s>", "pad": "<pad>"}},
}
# Config fields that name a special token, and the token (the vision placeholders of Qwen3.5's wrapper).
TOKEN_FIELDS = {
    "image_token_id": "<|image_pad|>",
    "video_token_id": "<|video_pad|>",
    "vision_start_token_id": "<|vision_start|>",
    "vision_end_token_id": "<|vision_end|>",
}
# Width-proportional sizes, scaled with hidden_size so their ratio to it is kept.
WIDTH_KEYS = (
    "intermediate_size",
    "shared_intermediate_size",
    "moe_intermediate_size",
    "shared_expert_intermediate_size",
)
EXPERT_KEYS = ("num_experts", "num_local_experts")
SMALL_VISION = {"depth": 1, "hidden_size": 32, "intermediate_size": 64, "num_heads": 2}
# Layer types that are softmax attention, in the fields layer_pattern reads (Nemotron-H writes "*").
ATTENTION_TYPES = ("attention", "full_attention", "*")
SPECIAL_RE = re.compile(r"<\|[a-z_]+\|>|</?[a-z_]+>")

# Ordinary English, so that the BPE learns merges for text outside the task (template text, prose).
ENGLISH = """
You are a helpful assistant. Please ensure responses are professional, accurate, and safe.
The user asks a question and the assistant answers it. Think step by step before you answer, then give
the answer in one word. A dictionary maps each key to a value; look up the key and report its value.
Language models read text as tokens. Attention reads from every earlier position, while a recurrent
state keeps a summary of everything it has seen. The weather today is cold and the river is high.
She opened the window, looked at the garden and wrote a letter to her brother in the city.
We measured the time it takes, wrote the numbers in a table, and drew a figure from them.
"""


def publisher(config_path) -> str:
    org = Path(config_path).name.split("__")[0]
    if org not in PUBLISHERS:
        raise ValueError(
            f"{config_path}: no chat template known for publisher {org!r}; name the file ORG__NAME.config.json"
        )
    return org


def _text(config: dict) -> dict:
    return config.get("text_config", config)


def layer_pattern(text: dict) -> list[str]:
    """One layer type per layer, from whichever field the config uses (a parallel-only config: all 'parallel')."""
    if text.get("layer_types"):
        return list(text["layer_types"])
    if text.get("hybrid_override_pattern"):
        return list(text["hybrid_override_pattern"])
    return ["parallel"] * text["num_hidden_layers"]


def period(pattern) -> int:
    """The smallest p such that the pattern is whole repeats of its first p layer types."""
    n = len(pattern)
    return next(p for p in range(1, n + 1) if n % p == 0 and all(pattern[i] == pattern[i % p] for i in range(n)))


def _default_layers(pattern) -> int:
    """Two periods and at least four layers, never deeper than published (a pattern without a shorter period,
    such as Nemotron-H's, keeps its whole depth)."""
    p = period(pattern)
    return min(len(pattern), p * max(2, math.ceil(4 / p)))


def _width_step(text: dict) -> int:
    """hidden_size must be a multiple of this: attention heads without an explicit head_dim split it, and a
    Mamba-2 mixer without an explicit d_ssm has expand * hidden channels split over its heads."""
    step = 1
    if not text.get("head_dim"):
        step = math.lcm(step, text["num_attention_heads"])
    if "mamba_n_heads" in text and not text.get("mamba_d_ssm"):
        expand = text.get("mamba_expand", 2)
        step = math.lcm(step, text["mamba_n_heads"] // math.gcd(text["mamba_n_heads"], expand))
    return step


def realshape_config(published: dict, layers=None, hidden=None, vocab=4096, experts=8, chunk=32) -> dict:
    """A scaled-down copy of a published config dict; every structural field not scaled is kept as published.

    layers: a whole number of periods of the layer pattern (default: two periods, at least four layers).
    hidden: width (default: the smallest valid width >= 64); width-proportional sizes keep their ratio to it.
    Head counts and head dimensions, gates, rotary settings, tying and multipliers are untouched; where the
    published model derives a head dimension from the width (Granite's attention and Mamba-2), it shrinks.
    chunk: Mamba-2's scan chunk at most this long. It tiles the computation without changing its result, and
    the plain-PyTorch scan pads every sequence to whole chunks (256 tokens for short prompts on CPU).
    """
    config = copy.deepcopy(published)
    text = _text(config)
    pattern = layer_pattern(text)
    p = period(pattern)
    layers = layers or _default_layers(pattern)
    if layers % p:
        raise ValueError(f"--layers {layers}: the layer pattern repeats every {p} layers; use a multiple of {p}")
    step = _width_step(text)
    hidden = hidden or step * math.ceil(64 / step)
    if hidden % step:
        raise ValueError(f"--hidden {hidden}: this config's head layout needs a multiple of {step}")
    scale = hidden / text["hidden_size"]
    for key in WIDTH_KEYS:
        if text.get(key):
            text[key] = max(8, 8 * round(text[key] * scale / 8))
    if "mamba_n_heads" in text and not text.get("mamba_d_ssm") and text.get("mamba_d_head") not in (None, "auto"):
        text["mamba_d_head"] = text.get("mamba_expand", 2) * hidden // text["mamba_n_heads"]
    text["hidden_size"] = hidden
    text["num_hidden_layers"] = layers
    if text.get("layer_types"):
        text["layer_types"] = [pattern[i % p] for i in range(layers)]
    if text.get("hybrid_override_pattern"):
        text["hybrid_override_pattern"] = "".join(pattern[i % p] for i in range(layers))
    for key in EXPERT_KEYS:
        if text.get(key):
            k = text.get("num_experts_per_tok", 1)
            text["num_experts_per_tok"] = min(experts, max(2, round(k * experts / text[key])))
            text[key] = experts
    if "mamba_n_heads" in text:  # a partial config's default chunk (256) counts as its value
        text["mamba_chunk_size"] = min(chunk, text.get("mamba_chunk_size") or 256)
    if "mamba_num_heads" in text:  # Nemotron-H's name for it
        text["chunk_size"] = min(chunk, text.get("chunk_size") or 128)
    text["vocab_size"] = vocab
    if "vision_config" in config:
        vis = config["vision_config"]
        vis.update(SMALL_VISION)
        vis["out_hidden_size"] = hidden
        vis["deepstack_visual_indexes"] = [i for i in vis.get("deepstack_visual_indexes", []) if i < vis["depth"]]
    return config


def _task_corpus(n: int = 400) -> list[str]:
    from hybridlens.tasks.retrieval import FORMATS, make_prompts

    texts = [ENGLISH]
    for seed, fmt in enumerate(FORMATS):
        for n_pairs in (2, 4, 8, 16):
            texts += [p.text + " " + p.target for p in make_prompts(seed, n // 4, n_pairs, fmt, 2)]
            paper = make_prompts(seed, n // 4, n_pairs, fmt, 1, framing="paper")
            texts += [p.text + "\n" + p.prefill + p.answer for p in paper]  # the paper's framing (chat models)
    return texts


def _task_words() -> list[str]:
    from hybridlens.tasks.vocab import KEYS, VALUES, language_forms

    return list(dict.fromkeys(KEYS + VALUES + [w for table in language_forms(2) for w in table.values()]))


def build_tokenizer(template: str | None, roles: dict, vocab_size: int = 4096):
    """A byte-level BPE (as Qwen, Granite and Falcon-H1 ship) trained on the task text and some English, with
    the template's special tokens (every `<|...|>` and `<tag>` it writes) and the publisher's bos/eos/pad."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    specials = list(dict.fromkeys([*roles.values(), *SPECIAL_RE.findall(template or "")]))
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size, special_tokens=specials, initial_alphabet=pre_tokenizers.ByteLevel.alphabet()
    )
    tok.train_from_iterator(_task_corpus(), trainer)
    tokens = {f"{role}_token": t for role, t in roles.items()}
    return PreTrainedTokenizerFast(
        tokenizer_object=tok, chat_template=template, additional_special_tokens=specials, **tokens
    )


def _set_token_ids(config: dict, tokenizer, config_eos: str | None):
    """Point every token-id field at this tokenizer's token: bos/eos/pad in the text config, and the wrapper's
    vision placeholders where the config has them."""
    text = _text(config)
    text["bos_token_id"] = tokenizer.bos_token_id
    text["eos_token_id"] = tokenizer.convert_tokens_to_ids(config_eos) if config_eos else tokenizer.eos_token_id
    text["pad_token_id"] = tokenizer.pad_token_id
    for key, token in TOKEN_FIELDS.items():
        if key in config:
            config[key] = tokenizer.convert_tokens_to_ids(token)


def _set_dtype(config: dict, dtype: str):
    for part in (config, config.get("text_config", {}), config.get("vision_config", {})):
        part.pop("torch_dtype", None)
        if part:
            part["dtype"] = dtype


def build_realshape(
    config_path,
    out_dir,
    layers=None,
    hidden=None,
    vocab=4096,
    experts=8,
    seed=0,
    dtype=None,
    shards=3,
    chunk=32,
    tokenizer="trained",
):
    """Write a random-weight checkpoint of `config_path`'s structure to `out_dir`; returns the in-memory model.

    dtype: storage dtype (default: the published one, bfloat16 for every preset model). shards: how many
    safetensors files the weights are split into (sharded with an index, as the hub stores large models).
    tokenizer: "trained", a BPE of `vocab` tokens trained here on the task text, in which every task word is
    one token; or "qwen", Qwen's real 151,669-token BPE (models.real_tokenizer; Qwen configs only), which
    splits task words as a real model's tokenizer does, and sets the vocabulary.
    """
    import transformers
    from transformers import AutoConfig, GenerationConfig

    config_path, out_dir = Path(config_path), Path(out_dir)
    published = json.loads(config_path.read_text())
    org = publisher(config_path)
    spec = PUBLISHERS[org]
    template = (REAL_CONFIGS / spec["template"]).read_text() if spec["template"] else None
    if tokenizer == "qwen":
        if org != "Qwen":
            raise ValueError(f"--tokenizer qwen: {config_path.name} is not a Qwen model; use the trained tokenizer")
        from hybridlens.models.real_tokenizer import qwen_tokenizer

        tokenizer = qwen_tokenizer(template)
        vocab = len(tokenizer)
    elif tokenizer == "trained":
        tokenizer = build_tokenizer(template, spec["tokens"], vocab)
        split = [w for w in _task_words() if len(tokenizer(" " + w, add_special_tokens=False)["input_ids"]) != 1]
        if split:  # keys and answers must be single tokens, or the experiments run out of words
            raise ValueError(
                f"--vocab {vocab}: {len(split)} of the {len(_task_words())} task words (e.g. {split[0]!r}) are "
                "several tokens in the trained BPE; use --vocab 1024 or more"
            )
    else:
        raise ValueError(f"--tokenizer {tokenizer!r}: use trained or qwen")
    config = realshape_config(published, layers, hidden, vocab, experts, chunk)
    dtype = dtype or _text(published).get("dtype") or published.get("torch_dtype") or "bfloat16"
    _set_dtype(config, dtype)
    _set_token_ids(config, tokenizer, spec.get("config_eos"))
    config.pop("transformers_version", None)
    cfg = AutoConfig.for_model(**config)
    cls = getattr(transformers, config["architectures"][0])
    torch.manual_seed(seed)
    # Sub-models are built in their config's dtype; cast all of it once so the saved weights are what it holds.
    model = cls(cfg).to(getattr(torch, dtype)).eval()
    text = cfg.get_text_config()
    model.generation_config = GenerationConfig(
        bos_token_id=text.bos_token_id, eos_token_id=tokenizer.eos_token_id, pad_token_id=text.pad_token_id
    )
    size = sum(p.numel() * p.element_size() for p in model.state_dict().values())
    save_checkpoint(out_dir, model, tokenizer, max_shard_size=max(1, size // shards + 1))
    return model, tokenizer


def main(argv=None):
    parser = argparse.ArgumentParser(prog="python -m hybridlens.models.realshape", description=__doc__.split("\n")[0])
    parser.add_argument("config", help="a published config.json, e.g. config/real-configs/ORG__NAME.config.json")
    parser.add_argument("out_dir")
    parser.add_argument("--layers", type=int, help="depth, a whole number of layer-pattern periods")
    parser.add_argument("--hidden", type=int, help="width (hidden_size)")
    parser.add_argument("--vocab", type=int, default=4096, help="vocabulary size (tokenizer and embedding)")
    parser.add_argument("--experts", type=int, default=8, help="routed experts per MoE layer")
    parser.add_argument("--dtype", help="storage dtype (default: the published one)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument(
        "--tokenizer",
        choices=["trained", "qwen"],
        default="trained",
        help="a BPE trained on the task text (--vocab tokens), or Qwen's real one (Qwen configs; sets the vocabulary)",
    )
    args = parser.parse_args(argv)
    try:
        model, _ = build_realshape(
            args.config,
            args.out_dir,
            args.layers,
            args.hidden,
            args.vocab,
            args.experts,
            args.seed,
            args.dtype,
            tokenizer=args.tokenizer,
        )
    except (ValueError, OSError) as err:  # a bad size or path: one line, no traceback
        parser.error(str(err))
    n = sum(p.numel() for p in model.parameters())
    print(f"{args.out_dir}: {type(model).__name__}, {n / 1e6:.2f} M parameters")


if __name__ == "__main__":
    main()
