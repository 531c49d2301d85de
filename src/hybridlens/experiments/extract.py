"""Activation extraction and the logit lens.

vocabulary   keys, value concepts and languages whose words are single tokens for the model's tokenizer
prompt_set   a task's prompts over that vocabulary
extract      capture write sites at a position set for a prompt set, batched by token length
logit_lens   per layer: residual norm and the rank of the correct answer under the unembedding
"""

from collections import defaultdict

import numpy as np
import torch

from hybridlens.interventions.patch import run
from hybridlens.tasks.retrieval import make_prompts, token_positions
from hybridlens.tasks.vocab import KEYS, VALUES, language_forms


def vocabulary(hm, n_pairs: int, n_languages: int):
    """(keys, value concepts, languages, counts) whose words are single tokens for `hm`'s tokenizer
    (all of them for the toy tokenizer; a subset for real ones)."""
    forms = language_forms(n_languages)
    keys = hm.single_token_words(KEYS)
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


@torch.no_grad()
def extract(hm, prompts, sites, position_set="final", batch_size=16):
    """Captured activations for every prompt.

    Returns a dict: site -> float32 array [prompts, P, d_model], plus "input_ids" [prompts, pos]
    (position_set "all" needs one token length), "positions" [prompts, P] and "answer_ids" [prompts].
    """
    sites = [str(s) for s in sites]
    out = {s: [None] * len(prompts) for s in sites}
    ids_all, pos_all = [None] * len(prompts), [None] * len(prompts)
    for chunk, ids, offsets in batches_by_length(hm, prompts, batch_size):
        positions = [token_positions(prompts[i], off, position_set) for i, off in zip(chunk, offsets, strict=True)]
        if len({len(p) for p in positions}) != 1:
            raise ValueError(f"position set {position_set!r} has different sizes within a batch; use 'final'")
        res = run(hm, ids, capture=sites, positions=positions, logits_to_keep=1)
        for j, i in enumerate(chunk):
            for s in sites:
                out[s][i] = res.captured[s][j].float().cpu().numpy()
            ids_all[i], pos_all[i] = ids[j].cpu().numpy(), np.array(positions[j])
    data = {s: np.stack(v) for s, v in out.items()}
    data["input_ids"] = np.stack(ids_all) if len({len(x) for x in ids_all}) == 1 else np.zeros((len(prompts), 0))
    data["positions"] = np.stack(pos_all)
    data["answer_ids"] = np.array([hm.token_id(p.answer) for p in prompts])
    return data


@torch.no_grad()
def logit_lens(hm, data, position=-1):
    """Rows {layer, kind, resid_norm, answer_rank, answer_top1} from captured `layers.{L}.layer_out`.

    The rank is 1 for the top token; `data` is what `extract` returned (with layer_out captured).
    """
    answer = torch.as_tensor(data["answer_ids"])
    rows = []
    for layer in range(hm.n_layers):
        h = torch.as_tensor(data[f"layers.{layer}.layer_out"][:, position], device=hm.device)
        logits = hm.unembed(h.to(hm.model.dtype)).float().cpu()
        rank = (logits > logits.gather(1, answer[:, None])).sum(1) + 1
        for i in range(len(answer)):
            rows.append(
                {
                    "prompt": i,
                    "layer": layer,
                    "kind": hm.kinds[layer],
                    "resid_norm": h[i].float().norm().item(),
                    "answer_rank": int(rank[i]),
                }
            )
    return rows
