"""The model view; what each family is lives in models/families/, and the core here holds no family name.

load_model     model + tokenizer from a hub id or local directory (safetensors only, no remote code)
HybridModel    one view of every registered hybrid family: layer kinds, groups, modules per site,
               cache access per channel, logit lens
SITES          site name -> where it lives and its shape
Site, parse_site
UnsupportedModel
"""

import contextlib
import functools
import re
from dataclasses import dataclass
from pathlib import Path

import torch

from hybridlens.models.families import UnsupportedModel, check_family, family_of
from hybridlens.models.source import check_manifest
from hybridlens.tasks.items import Turns

# Sites and their shapes, TransformerLens-style. Write sites are hooked on modules; state sites are
# read from and written to the transformers cache after a forward.
SITES = {
    "resid_pre": "[batch, pos, d_model]  input of decoder layer L",
    "mixer_out": "[batch, pos, d_model]  output of layer L's mixer (linear mixer for linear and parallel layers, "
    "attention for attention layers, the MLP for an mlp layer), before any residual multiplier",
    "layer_out": "[batch, pos, d_model]  output of decoder layer L (= resid_pre of L+1)",
    "state": "[batch, heads, d_k, d_v]  recurrent state of a linear (or parallel) layer, in the cache "
    "(Mamba-1: [batch, d_inner, d_state]; a short-convolution layer has none)",
    "conv": "[batch, channels, kernel]  conv state of a linear (or parallel) layer, in the cache",
    "kv": "([batch, kv_heads, pos, d_head], same)  keys and values of an attention (or parallel) layer",
}
WRITE_SITES = ("resid_pre", "mixer_out", "layer_out")
KINDS = ("linear", "attention", "parallel", "mlp")


@dataclass(frozen=True)
class Site:
    layer: int
    name: str

    def __str__(self):
        return f"layers.{self.layer}.{self.name}"


_SITE_RE = re.compile(r"layers\.(\d+)\.([a-z_]+)")


def parse_site(site) -> Site:
    """`layers.{L}.{name}` -> Site; anything else raises LookupError naming the valid sites."""
    if isinstance(site, Site):
        return site
    m = _SITE_RE.fullmatch(str(site))
    if not m or m.group(2) not in SITES:
        raise LookupError(f"unknown site {site!r}; sites are layers.{{L}}.{{{', '.join(SITES)}}}")
    return Site(int(m.group(1)), m.group(2))


def load_model(
    source, dtype="float32", device="cpu", device_map=None, attn_implementation="sdpa", family=None, prompts="chat"
):
    """Load a causal LM and its tokenizer through `from_pretrained`, safetensors only, no remote code.

    Args:
        source: hub id or local directory (a toy model saved by the pipeline is one).
        dtype: torch dtype name. device: where to put it, unless device_map (e.g. "auto",
        through accelerate) spreads it over several GPUs.
        attn_implementation: "sdpa" is faster and returns no attention weights; the engine switches to "eager"
            for the forwards whose attention it reads (hm.attention_implementation does the same for yours).
        family: the family the caller expects (a registry entry's); a checkpoint of another is refused.
        prompts: "chat" reads prompts in the tokenizer's chat template where it has one; "raw" reads every
            prompt as plain text (a base model's protocol), whatever the tokenizer brings.
    """
    from transformers import AutoConfig, AutoModelForCausalLM

    if Path(source).is_dir():
        check_manifest(source, str(source))  # a shipped checkpoint whose files changed is refused
    config = AutoConfig.from_pretrained(source, trust_remote_code=False)
    check_family(config.model_type, family, source)  # refuse unknown families before loading any weights
    model = AutoModelForCausalLM.from_pretrained(
        source,
        dtype=getattr(torch, dtype),
        use_safetensors=True,
        trust_remote_code=False,
        device_map=device_map,
        attn_implementation=attn_implementation,
    )
    if device_map is None:
        model = model.to(device)
    return HybridModel(model.eval(), _load_tokenizer(source, prompts), str(source))


def tokenizer_view(source, family=None, prompts="chat"):
    """A HybridModel of a local checkpoint's tokenizer over its architecture on the meta device, without its
    weights: what a task asks of the tokenizer (single-token words, where they stand in a prompt) can be
    checked before any job loads the model."""
    from transformers import AutoConfig, AutoModelForCausalLM

    config = AutoConfig.from_pretrained(source, trust_remote_code=False)
    check_family(config.model_type, family, source)
    with torch.device("meta"):
        model = AutoModelForCausalLM.from_config(config, trust_remote_code=False)
    return HybridModel(model, _load_tokenizer(source, prompts), str(source))


def _load_tokenizer(source, prompts="chat"):
    """The checkpoint's tokenizer, without its chat template for raw prompts. One that declares itself a plain
    `TokenizersBackend` (the toys' and the real-shape checkpoints') is loaded as that: AutoTokenizer would
    rebuild it as the class transformers registers for some model types (Qwen3.5-MoE's), which turns the toys'
    word-level vocabulary into <unk>."""
    import json

    from transformers import AutoTokenizer, TokenizersBackend

    config = Path(source) / "tokenizer_config.json"
    if config.is_file() and json.loads(config.read_text()).get("tokenizer_class") == "TokenizersBackend":
        tokenizer = TokenizersBackend.from_pretrained(source)
    else:
        tokenizer = AutoTokenizer.from_pretrained(source, trust_remote_code=False)
    if prompts == "raw":
        tokenizer.chat_template = None
    return tokenizer


class HybridModel:
    """One view of a hybrid causal LM.

    >>> hm = load_model("results/models/qwen_toy")
    >>> hm.kinds      # ['linear', 'linear', 'linear', 'attention', ...]
    >>> hm.groups     # [[0, 1, 2], [4, 5, 6]]
    >>> hm.module_for("layers.2.mixer_out")   # (module, "output")
    """

    def __init__(self, model, tokenizer, source=""):
        self.model, self.tokenizer, self.source = model, tokenizer, source
        self.family = family_of(model.config.model_type)
        self.family.prepare(model)
        self.config = model.config.get_text_config() if hasattr(model.config, "get_text_config") else model.config
        self.base = self.family.base_model(model)
        self.layers = list(self.base.layers)
        self.kinds = [self._kind(layer) for layer in self.layers]
        if not any(k in ("linear", "parallel") for k in self.kinds):
            raise UnsupportedModel(f"{source or type(model).__name__}: no linear layers, so it is not a hybrid model")
        self.groups = self._groups(self.kinds)
        # What each layer returns, for resumed(): found now, before any hook of a caller can see the forward.
        self.layer_returns = None if self.device.type == "meta" else self._layer_returns()

    def _kind(self, layer) -> str:
        has_lin = self.family.linear_mixer(layer) is not None
        has_att = self.family.attention_module(layer) is not None
        if has_lin or has_att:
            return "parallel" if has_lin and has_att else ("linear" if has_lin else "attention")
        if self.family.ffn(layer) is None:
            raise UnsupportedModel(
                f"{self.source}: a {type(layer).__name__} has no mixer family {self.family.name} knows"
            )
        return "mlp"

    @staticmethod
    def _groups(kinds):
        """Maximal runs of linear layers between attention layers (an MLP-only layer ends none); a parallel
        layer is a group of its own (it is also a reader)."""
        groups, run = [], []
        for i, k in enumerate(kinds):
            if k == "linear":
                run.append(i)
                continue
            if k == "mlp":
                continue
            if run:
                groups.append(run)
                run = []
            if k == "parallel":
                groups.append([i])
        if run:
            groups.append(run)
        return groups

    @property
    def n_layers(self):
        return len(self.layers)

    @property
    def d_model(self):
        return self.config.hidden_size

    @property
    def device(self):
        return next(self.model.parameters()).device

    def attention_layers(self):
        return [i for i, k in enumerate(self.kinds) if k in ("attention", "parallel")]

    def linear_layers(self):
        return [i for i, k in enumerate(self.kinds) if k in ("linear", "parallel")]

    @property
    def state_sites(self) -> tuple[str, ...]:
        """The cache sites a linear layer of this model has: ("state", "conv"), or ("conv",) for short convolutions."""
        return self.family.channels

    # --- modules -------------------------------------------------------------------------------
    def mixer(self, layer: int):
        kind, fam = self.kinds[layer], self.family
        if kind == "mlp":
            return fam.ffn(self.layers[layer])
        return (fam.attention_module if kind == "attention" else fam.linear_mixer)(self.layers[layer])

    def attention(self, layer: int):
        return self.family.attention_module(self.layers[layer])

    @contextlib.contextmanager
    def attention_implementation(self, name: str):
        """Forwards inside run with this attention implementation: "eager" returns attention weights, "sdpa"
        is faster and returns none. The model's own is restored after (it is switched only if it differs)."""
        before = self.model.config._attn_implementation
        if name == before:
            yield
            return
        self.model.set_attn_implementation(name)
        try:
            yield
        finally:
            self.model.set_attn_implementation(before)

    def head_mixer(self, layer: int):
        """(output projection, n_heads, head_dim) of an attention layer: its input holds the heads side by side,
        so a head is ablated by zeroing its slice there."""
        attn = self.attention(layer)
        if attn is None:
            raise LookupError(f"layer {layer} is a {self.kinds[layer]} layer; heads live in attention layers")
        return self.family.head_mixer(attn)

    def module_for(self, site):
        """(module, "input" | "output") that carries a write site."""
        site = parse_site(site)
        if not 0 <= site.layer < self.n_layers:
            raise LookupError(f"site {site}: layer {site.layer} out of range 0..{self.n_layers - 1}")
        if site.name not in WRITE_SITES:
            raise LookupError(f"site {site} lives in the cache, not on a module; use read_cache/write_cache")
        if site.name == "mixer_out":
            return self.mixer(site.layer), "output"
        return self.layers[site.layer], ("input" if site.name == "resid_pre" else "output")

    def _layer_returns(self) -> list:
        """Per decoder layer: None if it returns its hidden states, else the length of the tuple it returns
        (the hidden states first), as one token's forward in eval mode (no dropout draws) finds."""
        found, handles, training = {}, [], self.model.training
        for i, layer in enumerate(self.layers):
            note = lambda _m, _a, out, i=i: found.__setitem__(i, len(out) if isinstance(out, tuple) else None)  # noqa: E731
            handles.append(layer.register_forward_hook(note))
        try:
            with torch.no_grad():
                self.model.eval()(
                    torch.zeros(1, 1, dtype=torch.long, device=self.device), use_cache=False, logits_to_keep=1
                )
        finally:
            self.model.train(training)
            for handle in handles:
                handle.remove()
        return [found[i] for i in range(self.n_layers)]

    @contextlib.contextmanager
    def resumed(self, layer: int, stream):
        """Forwards inside run the decoder layers from `layer` on: the ones before it stand aside for modules
        that return `stream`, the residual stream entering `layer` for the tokens the forward is given
        ([batch, pos, d_model]); their caches are not advanced. Everything the model computes around its
        layers (embeddings, position embeddings, masks) it computes as always, whatever the family.
        layer = n_layers resumes after the last layer: `stream` is what leaves it."""
        if not 0 < layer <= self.n_layers:
            raise ValueError(f"resume at layer {layer}: give 1..{self.n_layers} (0 resumes nothing)")
        returns, stack = self.layer_returns, self.base.layers
        originals = [stack[i] for i in range(layer)]
        try:
            for i, original in enumerate(originals):
                stack[i] = _StandIn(original, stream, returns[i], last=i == layer - 1)
            yield
        finally:
            for i, original in enumerate(originals):
                stack[i] = original

    # --- cache ---------------------------------------------------------------------------------
    def new_cache(self):
        from transformers import DynamicCache

        return DynamicCache(config=self.model.config)

    def _check_channel(self, site):
        site = parse_site(site)
        if not 0 <= site.layer < self.n_layers:
            raise LookupError(f"site {site}: layer {site.layer} out of range 0..{self.n_layers - 1}")
        kind = self.kinds[site.layer]
        if site.name in ("state", "conv") and kind in ("attention", "mlp"):
            raise LookupError(f"site {site}: layer {site.layer} is an {kind} layer, it has no {site.name}")
        if site.name in ("state", "conv") and site.name not in self.state_sites:
            raise LookupError(
                f"site {site}: a {self.family.mixer} layer keeps no {site.name}; its cache sites are "
                f"{', '.join(self.state_sites)}"
            )
        if site.name == "kv" and kind in ("linear", "mlp"):
            raise LookupError(f"site {site}: layer {site.layer} is a {kind} layer, it has no kv")
        if site.name in WRITE_SITES:
            raise LookupError(f"site {site} is a write site; capture it with hooks")
        return site

    def read_cache(self, cache, site):
        """The tensor(s) of a state site: state / conv tensor, or (keys, values) for kv."""
        site = self._check_channel(site)
        layer = cache.layers[site.layer]
        if site.name == "state":
            return layer.recurrent_states[0]
        if site.name == "conv":
            return layer.conv_states[0]
        return layer.keys, layer.values

    def write_cache(self, cache, site, value):
        """Replace a state site's contents in place (shapes must match; kv may change length)."""
        site = self._check_channel(site)
        layer = cache.layers[site.layer]
        if site.name == "kv":
            if hasattr(layer, "cumulative_length") and value[0].shape[-2] != layer.keys.shape[-2]:
                layer.cumulative_length = value[0].shape[-2]  # a sliding-window layer sizes its mask by this count
            layer.keys, layer.values = value
        else:
            target = layer.recurrent_states[0] if site.name == "state" else layer.conv_states[0]
            if target.shape != value.shape:
                raise ValueError(f"site {site}: shape {tuple(value.shape)} != cached {tuple(target.shape)}")
            target.copy_(value)

    # --- text ------------------------------------------------------------------------------------
    @functools.cached_property
    def n_languages(self) -> int:
        """The toy languages this model's tokenizer holds (tasks.vocab.toy_languages): a toy's tokenizer is built
        with every form of every language it trains on, so this is a fact of the checkpoint, read from it. Any
        other tokenizer reads real text, whose style tasks keep the default two."""
        from hybridlens.tasks.vocab import DEFAULT_LANGUAGES, toy_languages

        return max(toy_languages(self.tokenizer.get_vocab()), DEFAULT_LANGUAGES)

    @functools.cached_property
    def has_chat_template(self) -> bool:
        return bool(getattr(self.tokenizer, "chat_template", None))

    def _skeleton(self, system: bool) -> tuple[str, ...]:
        """The chat template around the turns: literal pieces between which the system turn (if any) and the
        user turn go, the last piece ending where the assistant turn starts (rendered once per model)."""
        known = self.__dict__.setdefault("_skeletons", {})
        if system not in known:
            known[system] = self._render_skeleton(system)
        return known[system]

    def _render_skeleton(self, system: bool) -> tuple[str, ...]:
        marks = ("\x00system\x00", "\x00user\x00")
        messages = [{"role": "system", "content": marks[0]}] if system else []
        text = self.tokenizer.apply_chat_template(
            [*messages, {"role": "user", "content": marks[1]}],
            add_generation_prompt=True,
            tokenize=False,
            enable_thinking=False,
        )
        pieces = re.split("\x00(?:system|user)\x00", text)
        if len(pieces) != len(messages) + 2:
            raise ValueError(f"chat template of {self.source} does not place every turn once; cannot frame prompts")
        return tuple(pieces)

    def render(self, turns) -> tuple[str, list[tuple[int, int, int]]]:
        """(the text the model reads, [(start in it, start in turns.joined, length)] per turn): the turns in
        the tokenizer's chat template, the assistant turn prefilled; without a template, or for raw turns,
        turns.joined."""
        turns = turns if isinstance(turns, Turns) else Turns(turns)
        if turns.raw or not self.has_chat_template:
            return turns.joined, [(0, 0, len(turns.joined))]
        skeleton = self._skeleton(bool(turns.system))
        contents = [turns.system, turns.user] if turns.system else [turns.user]
        text, pieces, joined_at = skeleton[0], [], 0
        for content, literal in zip([*contents, turns.prefill], [*skeleton[1:], ""], strict=True):
            if content:
                pieces.append((len(text), joined_at, len(content)))
                joined_at += len(content) + 1
            text += content + literal
        return text, pieces

    def tokenize(self, prompts):
        """(input ids, offsets) per prompt (a string, the user turn, or Turns) rendered by render(); offsets
        index the prompt's Turns.joined, and tokens of the chat template get (-1, -1)."""
        rendered = [self.render(p) for p in prompts]
        enc = self.tokenizer([text for text, _ in rendered], add_special_tokens=False, return_offsets_mapping=True)
        pieces = [p for _, p in rendered]
        return enc["input_ids"], [_to_joined(o, p) for o, p in zip(enc["offset_mapping"], pieces, strict=True)]

    def encode(self, prompts):
        """Token ids [batch, pos] and offset mappings; prompts of one batch must tokenize to one length."""
        ids, offsets = self.tokenize(list(prompts))
        lengths = {len(x) for x in ids}
        if len(lengths) != 1:
            raise ValueError(f"texts of one batch tokenize to different lengths {sorted(lengths)}; batch by length")
        return torch.tensor(ids, device=self.device), offsets

    def pad(self, ids) -> tuple[torch.Tensor, torch.Tensor, list[int]]:
        """Token id lists of any lengths, left-padded to one: (ids [B, T], attention mask [B, T], each
        item's padding, which shifts its positions). Pad tokens are masked, so their id does not matter."""
        length = max(map(len, ids))
        pad = self.tokenizer.pad_token_id if self.tokenizer.pad_token_id is not None else 0
        shifts = [length - len(x) for x in ids]
        padded = torch.tensor([[pad] * s + list(x) for s, x in zip(shifts, ids, strict=True)], device=self.device)
        mask = torch.tensor([[0] * s + [1] * len(x) for s, x in zip(shifts, ids, strict=True)], device=self.device)
        return padded, mask, shifts

    def token_id(self, word: str) -> int:
        """The single token of `word` as it follows a space in the prompts (BPE tokenizers fold the space in)."""
        ids = self.tokenizer(" " + word, add_special_tokens=False)["input_ids"]
        if len(ids) != 1:
            raise ValueError(f"{word!r} is {len(ids)} tokens in this tokenizer; answers must be single tokens")
        if ids[0] == self.tokenizer.unk_token_id:  # a word-level tokenizer maps every unknown word to one token
            raise ValueError(f"{word!r} is not in this tokenizer's vocabulary (it encodes as the unknown token)")
        return ids[0]

    def single_token_words(self, words) -> list[str]:
        """The words of `words` that are one token after a space, so they can be keys and answers."""
        keep = []
        for w in words:
            try:
                self.token_id(w)
            except ValueError:
                continue
            keep.append(w)
        return keep

    # --- read-outs -----------------------------------------------------------------------------
    def unembed(self, hidden):
        """Logit lens: final norm, unembedding and the family's logit multiplier. [.., d_model] -> [.., vocab]"""
        norm = getattr(self.base, self.family.final_norm)
        return self.model.lm_head(norm(hidden)) * self.family.logit_scale(self.config)


class _StandIn(torch.nn.Module):
    """A decoder layer that stands aside: returns a given stream in the layer's output structure, and answers
    every attribute the model's loop reads of the layer (its kind, its index) as the layer does."""

    def __init__(self, layer, stream, returns, last):
        super().__init__()
        object.__setattr__(self, "layer", layer)  # not a submodule: the parameters stay the model's own
        self.stream, self.returns, self.last = stream, returns, last

    def forward(self, *args, **kwargs):
        # The layer after the last stand-in may work in place on what it is given; earlier outputs go unread.
        stream = self.stream.clone() if self.last else self.stream
        return stream if self.returns is None else (stream, *[None] * (self.returns - 1))

    def __getattr__(self, name):
        try:
            return super().__getattr__(name)
        except AttributeError:
            return getattr(object.__getattribute__(self, "layer"), name)


def _to_joined(offsets, pieces):
    """Token offsets in a rendered text -> offsets in the turns' joined text; (-1, -1) outside every turn."""
    out = []
    for a, b in offsets:
        for start, joined, length in pieces:
            if start <= a < start + length:
                out.append((a - start + joined, min(b, start + length) - start + joined))
                break
        else:
            out.append((-1, -1))
    return out
