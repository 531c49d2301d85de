"""Items in a model's tokens, and the engine on them: what a notebook calls with a task's items or a user's own
prompts. The engine (interventions.engine) sees token ids and positions only; these turn items into them.

encode         a batch of items -> Batch: token ids of one length, offsets, position sets, choice tokens
answer_tokens  per item and word, the tokens the word is where the answer stands (after the prompt's end)
runner         a Runner over a batch of items of one token length, with the Batch that names their positions
transplant     each host's final-position logits with its donor's writes at sites copied in at a position set
batches            (indices, input ids, mask, paddings, offsets) per batch, left-padded where the family pads exactly
batches_by_length  (indices, input ids, offsets) per batch of items of one token length, shortest first
item_batches       batches of items whose prompts (host, donor, ...) each share a token length, groups as first seen
"""

from collections import defaultdict
from dataclasses import dataclass

import torch

from hybridlens.interventions.engine import Runner, transplant_ids
from hybridlens.tasks.items import choice_words, entry_parts, token_positions, turns


def answer_tokens(hm, items, words=None, strict: bool = True) -> list[list[list[int] | None]]:
    """Per item and word (default: its choices), the word's tokens where the answer stands: the tokens that
    rendered prompt + lead + word has past the prompt's own. A word that changes the prompt's last token (it
    merges with it) or holds the unknown token is refused (strict), or given as None: its logit cannot be
    read at the prompt's final position."""
    words = [choice_words(it) for it in items] if words is None else words
    texts = [hm.render(turns(it))[0] for it in items]
    tok = hm.tokenizer
    prompts = tok(texts, add_special_tokens=False)["input_ids"]
    flat = [t + it.lead + w for t, it, ws in zip(texts, items, words, strict=True) for w in ws]
    full = iter(tok(flat, add_special_tokens=False)["input_ids"]) if flat else iter(())
    out = []
    for it, prompt, ws in zip(items, prompts, words, strict=True):
        row, label = [], getattr(it, "name", "") or "item"
        for w in ws:
            ids = next(full)
            problem = None
            if ids[: len(prompt)] != prompt or len(ids) == len(prompt):
                problem = f"{label}: answer {w!r} merges with the prompt's last token"
            elif tok.unk_token_id is not None and tok.unk_token_id in ids[len(prompt) :]:
                problem = f"{label}: answer {w!r} is not in the tokenizer's vocabulary"
            if problem and strict:
                raise ValueError(problem)
            row.append(None if problem else ids[len(prompt) :])
        out.append(row)
    return out


@dataclass
class Batch:
    """Items in a model's tokens: ids [B, T] of one length, offsets into each item's joined turns and the
    first token of every choice where the answer stands, choices [B, E] (None if not asked for)."""

    items: list
    ids: torch.Tensor
    offsets: list
    choices: torch.Tensor | None = None

    def positions(self, part: str) -> list[list[int]]:
        return [token_positions(it, o, part) for it, o in zip(self.items, self.offsets, strict=True)]

    def entry_positions(self, entries) -> list[list[int]]:
        """Per item, the token positions of one dictionary entry (its key and value; in hop its links too)."""
        return [
            [i for part in entry_parts(it, e) for i in token_positions(it, o, part)]
            for it, o, e in zip(self.items, self.offsets, entries, strict=True)
        ]


def encode(hm, items, choices: bool = True) -> Batch:
    """A Batch of items that tokenize to one length (ValueError otherwise)."""
    ids, offsets = hm.encode([turns(it) for it in items])
    table = None
    if choices:
        firsts = [[t[0] for t in row] for row in answer_tokens(hm, items)]
        if len({len(r) for r in firsts}) != 1:
            raise ValueError("items of one batch have different numbers of choices; batch them apart")
        table = torch.tensor(firsts, device=ids.device)
    return Batch(list(items), ids, offsets, table)


def runner(hm, items, minimal: bool | None = None):
    """(Runner, Batch) for items of one token length: the Runner reads their choices' logits, the Batch gives
    their position sets and entries (batch.positions("final"), batch.entry_positions(...))."""
    batch = encode(hm, items)
    return Runner(hm, batch.ids, batch.choices, minimal=minimal), batch


def transplant(hm, donors, hosts, sites, positions="final"):
    """Final-position logits [n, vocab] of each host item with its donor's writes at `sites` copied in.

    donors[i] and hosts[i] are items (tasks.items.Item, tasks.retrieval.Prompt, a JSONL task's lines);
    `positions` is a position set or a span name (token_positions) and must cover as many tokens in each
    donor as in its host. Items of any lengths; the result is in item order.
    """
    if len(donors) != len(hosts):
        raise ValueError(f"{len(donors)} donors for {len(hosts)} hosts; give one donor per host")
    donor_ids, donor_offsets = hm.tokenize([turns(p) for p in donors])
    host_ids, host_offsets = hm.tokenize([turns(p) for p in hosts])
    at_donor = [token_positions(p, o, positions) for p, o in zip(donors, donor_offsets, strict=True)]
    at_host = [token_positions(p, o, positions) for p, o in zip(hosts, host_offsets, strict=True)]
    for i, (d, h) in enumerate(zip(at_donor, at_host, strict=True)):
        if len(d) != len(h):
            raise ValueError(f"item {i}: position set {positions!r} has {len(d)} donor and {len(h)} host tokens")
    return transplant_ids(hm, donor_ids, host_ids, sites, at_donor, at_host)


def batches_by_length(hm, prompts, batch_size):
    """Yield (indices, input_ids, offsets) with prompts of one token length per batch (no padding)."""
    all_ids, all_offsets = hm.tokenize([turns(p) for p in prompts])
    by_len = defaultdict(list)
    for i, ids in enumerate(all_ids):
        by_len[len(ids)].append(i)
    for length in sorted(by_len):
        idx = by_len[length]
        for start in range(0, len(idx), batch_size):
            chunk = idx[start : start + batch_size]
            ids = torch.tensor([all_ids[i] for i in chunk], device=hm.device)
            yield chunk, ids, [all_offsets[i] for i in chunk]


def batches(hm, prompts, batch_size):
    """Yield (indices, input_ids, attention mask or None, paddings, offsets): prompts of any lengths, shortest
    first, left-padded to one length per batch (HybridModel.pad) where the model's family pads exactly; else
    batches of one length (batches_by_length). A batch without padding gets no mask, so it runs the very
    forward an unpadded batch runs."""
    if not hm.family.left_padding:
        for chunk, ids, offsets in batches_by_length(hm, prompts, batch_size):
            yield chunk, ids, None, [0] * len(chunk), offsets
        return
    all_ids, all_offsets = hm.tokenize([turns(p) for p in prompts])
    order = sorted(range(len(prompts)), key=lambda i: len(all_ids[i]))
    for start in range(0, len(order), batch_size):
        chunk = order[start : start + batch_size]
        ids, mask, shifts = hm.pad([all_ids[i] for i in chunk])
        yield chunk, ids, mask if any(shifts) else None, shifts, [all_offsets[i] for i in chunk]


def item_batches(hm, items, prompts_of, batch_size):
    """Yield lists of at most batch_size items whose prompts, prompts_of(item) -> (host, donor, ...), have
    the same token lengths; groups in the order their first item comes, items in their order within one."""
    by_len = {}
    for t in items:
        key = tuple(len(ids) for ids in hm.tokenize([turns(p) for p in prompts_of(t)])[0])
        by_len.setdefault(key, []).append(t)
    for group in by_len.values():
        for start in range(0, len(group), batch_size):
            yield group[start : start + batch_size]
