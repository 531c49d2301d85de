"""Activation extraction and the logit lens.

extract      capture write sites at a position set for a prompt set, batched by token length
logit_lens   per layer: residual norm and the rank of the correct answer under the unembedding
"""

import numpy as np
import torch

from hybridlens.interventions.on_items import answer_tokens, batches
from hybridlens.interventions.patch import run
from hybridlens.tasks.items import token_positions


@torch.no_grad()
def extract(hm, prompts, sites, position_set="final", batch_size=16):
    """Captured activations for every prompt, of any lengths (on_items.batches pads where it is exact).

    Returns a dict: site -> float32 array [prompts, P, d_model], plus "input_ids" [prompts, longest prompt]
    (each prompt's tokens, then -1 past its end), "lengths" [prompts], "positions" [prompts, P] (position set
    "all" needs one token length) and "answer_ids" [prompts].
    """
    sites = [str(s) for s in sites]
    out = {s: [None] * len(prompts) for s in sites}
    ids_all, pos_all = [None] * len(prompts), [None] * len(prompts)
    for chunk, ids, mask, shifts, offsets in batches(hm, prompts, batch_size):
        positions = [token_positions(prompts[i], off, position_set) for i, off in zip(chunk, offsets, strict=True)]
        if len({len(p) for p in positions}) != 1:
            raise ValueError(f"position set {position_set!r} has different sizes within a batch; use 'final'")
        padded = [[p + s for p in at] for at, s in zip(positions, shifts, strict=True)]
        res = run(hm, ids, capture=sites, positions=padded, logits_to_keep=1, attention_mask=mask)
        for j, i in enumerate(chunk):
            for s in sites:
                out[s][i] = res.captured[s][j].float().cpu().numpy()
            ids_all[i], pos_all[i] = ids[j, shifts[j] :].cpu().numpy(), np.array(positions[j])
    data = {s: np.stack(v) for s, v in out.items()}
    data["lengths"] = np.array([len(x) for x in ids_all])
    data["input_ids"] = np.full((len(prompts), data["lengths"].max()), -1, dtype=np.int64)
    for i, x in enumerate(ids_all):
        data["input_ids"][i, : len(x)] = x
    data["positions"] = np.stack(pos_all)
    data["answer_ids"] = np.array([row[0][0] for row in answer_tokens(hm, prompts, [[p.answer] for p in prompts])])
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
