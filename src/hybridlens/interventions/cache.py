"""Prefill, cache surgery and continuation through the transformers cache.

prefill     one forward that fills a fresh cache; returns the last position's logits and the cache
greedy      greedy decoding of n tokens, from a prompt or continuing a (possibly edited) cache
states      the state channel of a cache, site by site (a fixed size, whatever the context's length)
cut         a copy of a cache with one memory channel emptied or replaced by another cache's
splice      a cache with the KV channel of one context and the state channel of another (of any length)
cut_at      a copy of a cache whose keys and values at some positions are another cache's
CONDITIONS  the split-prefill conditions, each a function (hm, cache, neutral, other, cues) -> cache

The two channels: "kv" is the attention layers' keys and values; "state" is the linear layers' recurrent
and conv states. A Falcon-H1 parallel layer holds both, and each is handled on its own.
"""

import copy

import torch

CHANNELS = ("kv", "state")


@torch.no_grad()
def prefill(hm, input_ids):
    """[batch, pos] -> (logits [batch, vocab] at the last position, filled cache)."""
    cache = hm.new_cache()
    out = hm.model(input_ids, cache=cache, use_cache=True, logits_to_keep=1)
    return out.logits[:, -1], cache


@torch.no_grad()
def greedy(hm, input_ids, n_new: int, cache=None, start: int | None = None):
    """Greedy tokens [batch, n_new] after `input_ids`; with `cache`, `input_ids` continue it.

    `start` is the position of input_ids[:, 0] (default: the cache's length). Pass it when the KV
    channel was dropped, so that the continuation keeps the positions of the full prompt.
    Returns (tokens, logits of the first new token [batch, vocab]). The cache is advanced in place.
    """
    if cache is None:
        cache = hm.new_cache()
    if start is None:
        start = cache.get_seq_length() if hm.attention_layers() else 0
    n = input_ids.shape[1]
    positions = torch.arange(start, start + n, device=input_ids.device)[None].expand(input_ids.shape[0], -1)
    out = hm.model(input_ids, cache=cache, use_cache=True, logits_to_keep=1, position_ids=positions)
    first = out.logits[:, -1]
    tokens = [first.argmax(-1)]
    for i in range(n_new - 1):
        pos = torch.full_like(tokens[-1][:, None], start + n + i)
        out = hm.model(tokens[-1][:, None], cache=cache, use_cache=True, position_ids=pos)
        tokens.append(out.logits[:, -1].argmax(-1))
    return torch.stack(tokens, 1), first


def channel_sites(hm, channel: str) -> list[str]:
    """The cache sites of one memory channel, layer by layer."""
    if channel == "kv":
        return [f"layers.{i}.kv" for i in hm.attention_layers()]
    if channel == "state":
        return [f"layers.{i}.{s}" for i in hm.linear_layers() for s in hm.state_sites]
    raise ValueError(f"unknown memory channel {channel!r}; use one of {CHANNELS}")


def states(hm, cache) -> dict:
    """{site: tensor} of the state channel: what the linear layers keep of a context, the same size for a
    context of any length."""
    return {site: hm.read_cache(cache, site) for site in channel_sites(hm, "state")}


def cut(hm, cache, channel: str, source=None):
    """A copy of `cache` whose `channel` is emptied (source None) or taken from `source`.

    Emptied KV has length 0, so the continuation's attention sees only its own tokens; emptied states are
    zero, which is where a fresh prefill starts. A KV source must come from a context of the same length; a
    state source (a cache, or states()) from a context of any length, since a state has one size.
    """
    out = copy.deepcopy(cache)
    for site in channel_sites(hm, channel):
        if source is not None and channel == "kv":
            value = tuple(v.clone() for v in hm.read_cache(source, site))
            if value[0].shape != hm.read_cache(out, site)[0].shape:
                raise ValueError(f"site {site}: the source context's KV {tuple(value[0].shape)} has another shape")
        elif source is not None:
            value = (source[site] if isinstance(source, dict) else hm.read_cache(source, site)).clone()
        elif channel == "kv":
            keys, values = hm.read_cache(out, site)
            value = (keys[..., :0, :], values[..., :0, :])
        else:
            value = torch.zeros_like(hm.read_cache(out, site))
        hm.write_cache(out, site, value)
    return out


def splice(hm, kv_from, state_from):
    """The KV channel of `kv_from` with the state channel of `state_from` (a cache or states(), of a context
    of any length): the continuation reads one context through attention and another through the state."""
    return cut(hm, kv_from, "state", source=state_from)


def cut_at(hm, cache, positions, source):
    """A copy of `cache` whose attention keys and values at `positions` (shared, or one list per batch row) are
    `source`'s (a context of the same length); the states are kept. It asks whether attention reads those
    tokens when the state is there, which emptying a whole channel cannot tell: without its state a model may
    read what it otherwise ignores."""
    rows = positions if positions and isinstance(positions[0], list | tuple) else None
    if not positions or (rows and not all(rows)):
        raise ValueError("cut_at needs the context positions to replace; got none")
    out = copy.deepcopy(cache)
    for site in channel_sites(hm, "kv"):
        keys, values = (t.clone() for t in hm.read_cache(out, site))
        new_keys, new_values = hm.read_cache(source, site)
        if new_keys.shape != keys.shape:
            raise ValueError(f"site {site}: the source context's KV {tuple(new_keys.shape)} has another shape")
        for row, at in enumerate(rows) if rows else [(slice(None), positions)]:
            keys[row, ..., at, :], values[row, ..., at, :] = new_keys[row, ..., at, :], new_values[row, ..., at, :]
        hm.write_cache(out, site, (keys, values))
    return out


# name -> (hm, cache, neutral, other, cues) -> a new cache (continuing advances a cache in place, so every
# condition works on a copy). `neutral` is the cache of a neutral context of the same length; `other` is
# another context's cache or states() (state-swap: KV of this context, states of the other, of any length);
# `cues` are the positions of the context's style cues (persona and language), shared or one list per row.
CONDITIONS = {
    "full": lambda hm, c, neutral, other, cues=None: copy.deepcopy(c),
    "kv_only": lambda hm, c, neutral, other, cues=None: cut(hm, c, "state"),
    "kv_only_neutral": lambda hm, c, neutral, other, cues=None: cut(hm, c, "state", neutral),
    "state_only": lambda hm, c, neutral, other, cues=None: cut(hm, c, "kv"),
    "state_only_neutral": lambda hm, c, neutral, other, cues=None: cut(hm, c, "kv", neutral),
    "state_swap": lambda hm, c, neutral, other, cues=None: splice(hm, c, other),
    "cues_kv_neutral": lambda hm, c, neutral, other, cues=None: cut_at(hm, c, cues, neutral),
}
