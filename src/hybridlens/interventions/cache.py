"""Prefill and continue through the transformers cache.

prefill   one forward that fills a fresh cache; returns the last position's logits and the cache
greedy    greedy decoding of n tokens, from a prompt or from a prefilled cache
"""

import torch


@torch.no_grad()
def prefill(hm, input_ids):
    """[batch, pos] -> (logits [batch, vocab] at the last position, filled cache)."""
    cache = hm.new_cache()
    out = hm.model(input_ids, past_key_values=cache, use_cache=True, logits_to_keep=1)
    return out.logits[:, -1], out.past_key_values


@torch.no_grad()
def greedy(hm, input_ids, n_new: int, cache=None):
    """Greedy tokens [batch, n_new] after `input_ids`; with `cache`, `input_ids` continue it.

    Returns (tokens, logits of the first new token [batch, vocab]).
    """
    if cache is None:
        cache = hm.new_cache()
    out = hm.model(input_ids, past_key_values=cache, use_cache=True, logits_to_keep=1)
    first = out.logits[:, -1]
    tokens = [first.argmax(-1)]
    for _ in range(n_new - 1):
        out = hm.model(tokens[-1][:, None], past_key_values=out.past_key_values, use_cache=True)
        tokens.append(out.logits[:, -1].argmax(-1))
    return torch.stack(tokens, 1), first
