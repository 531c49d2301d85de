"""Prompt sets over the words a model's tokenizer keeps as single tokens, and batches of one token length.

vocabulary         keys, value concepts and languages whose words are single tokens for the model's tokenizer
prompt_set         a task's prompts over that vocabulary
batches_by_length  (indices, input ids, offsets) per batch of prompts of one token length, shortest first
item_batches       batches of items whose prompts (host, donor, ...) each share a token length, groups as first seen
"""

from collections import defaultdict

import torch

from hybridlens.tasks.retrieval import make_prompts
from hybridlens.tasks.vocab import EXTRA_KEYS, KEYS, VALUES, language_forms


def vocabulary(hm, n_pairs: int, n_languages: int):
    """(keys, value concepts, languages, counts) whose words are single tokens for `hm`'s tokenizer
    (all of them for the toy tokenizer; a subset for real ones)."""
    forms = language_forms(n_languages)
    keys = hm.single_token_words(KEYS + EXTRA_KEYS)
    languages, values = [], list(VALUES)
    for i, f in enumerate(forms):  # add a language only while enough concepts stay single tokens in all
        kept = [v for v in values if hm.single_token_words([f[v]])]
        if len(kept) >= n_pairs:
            languages, values = [*languages, i], kept
    counts = {"keys": len(keys), "values": len(values), "languages": len(languages)}
    if not languages or len(keys) < n_pairs:  # a kept language already guarantees n_pairs values
        raise ValueError(
            f"tokenizer of {hm.source}: single-token words {counts} are too few for {n_pairs}-pair dictionaries; "
            "use fewer pairs in the task"
        )
    return keys, values, languages, counts


def prompt_set(hm, task: dict, n_languages: int):
    """(prompts, counts): the task's prompts over single-token keys, value concepts and languages."""
    n_pairs = task["n_pairs"]
    keys, values, languages, counts = vocabulary(hm, n_pairs, n_languages)
    prompts = make_prompts(
        task["seed"], task["n"], n_pairs, task["format"], n_languages, languages=languages, keys=keys, values=values
    )
    return prompts, counts


def batches_by_length(hm, prompts, batch_size):
    """Yield (indices, input_ids, offsets) with prompts of one token length per batch (no padding)."""
    all_ids, all_offsets = hm.tokenize([p.text for p in prompts])
    by_len = defaultdict(list)
    for i, ids in enumerate(all_ids):
        by_len[len(ids)].append(i)
    for length in sorted(by_len):
        idx = by_len[length]
        for start in range(0, len(idx), batch_size):
            chunk = idx[start : start + batch_size]
            ids = torch.tensor([all_ids[i] for i in chunk], device=hm.device)
            yield chunk, ids, [all_offsets[i] for i in chunk]


def item_batches(hm, items, prompts_of, batch_size):
    """Yield lists of at most batch_size items whose prompts, prompts_of(item) -> (host, donor, ...), have
    the same token lengths; groups in the order their first item comes, items in their order within one."""
    by_len = {}
    for t in items:
        key = tuple(len(hm.encode([p.text])[0][0]) for p in prompts_of(t))
        by_len.setdefault(key, []).append(t)
    for group in by_len.values():
        for start in range(0, len(group), batch_size):
            yield group[start : start + batch_size]
