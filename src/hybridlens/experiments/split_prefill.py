"""Split-prefill and state-swap: what the KV cache and the recurrent state each carry.

Each item (a style task item, tasks/style.py) is a context A, which sets content (facts) and style (the
language it is written and answered in, a persona), and a question. A is prefilled; its cache is edited by
one of the CONDITIONS (interventions/cache.py); the question is continued from the edited cache at A's
positions and n_new tokens are generated greedily. The same item without its persona, generated from its
whole prompt, is the no-persona baseline.

Every generation is read as text by the task's Lexicon: retrieval (the asked value is named, in any
language), language (identified on the whole generation), persona (the rate of the persona's markers per
generated word). For the state-swap, context B has A's keys and question but other values, another language
and another persona, and its length may differ: its state is a fixed-size summary of all of B. So every
output is attributed: its content to A (the KV side) or B (the state side), its language and persona too.

run_items    generations and per-item metrics under every condition and the no-persona baseline
retention    metric under each condition / under the full cache and / without a persona, with intervals
attribution  the state-swap table: content source x style source
samples      a few items' generations side by side, condition by condition
"""

import random

import numpy as np
import torch

from hybridlens.interventions.cache import CONDITIONS, greedy, prefill, states
from hybridlens.interventions.on_items import batches_by_length
from hybridlens.stats import bootstrap
from hybridlens.tasks.items import token_positions, turns

PROPERTIES = ("retrieval", "language", "persona")
BASELINE = "no_persona"  # the full cache of the item without its persona
SOURCES = ("A", "B", "other", "none")
# A / B: that context's asked value in its own language; *_related: the same concept in another language;
# *_dict: another fact's value of that context; other: a value in neither; none: no value named.
CONTENT_SOURCES = ("A", "A_related", "B", "B_related", "A_dict", "B_dict", "other", "none")
# Neutral words for the neutral context: function words that every tokenizer keeps whole.
NEUTRAL_WORDS = ("the", "is", "of", "and", "to", "in", "a", "that", "it", "as")


@torch.no_grad()
def run_items(hm, items, n_new: int, lexicon, seed: int = 0, batch_size: int = 32) -> list[dict]:
    """One row per (item, condition) and per item of the no-persona baseline: the generation, its three
    metrics and its three sources. Items are batched by the token lengths of their context and question
    (no padding); B's states come from prefills of B's own lengths."""
    rng, stop = random.Random(seed), _stop_ids(hm)
    a_ids, offsets = hm.tokenize([turns(it) for it in items])
    splits = [token_positions(it, o, "question")[0] for it, o in zip(items, offsets, strict=True)]
    swap = [it.partners["swap"] for it in items]
    b_ids, b_offsets = hm.tokenize([turns(b) for b in swap])
    b_splits = [token_positions(b, o, "question")[0] for b, o in zip(swap, b_offsets, strict=True)]
    groups = {}
    for i, (ids, split) in enumerate(zip(a_ids, splits, strict=True)):
        groups.setdefault((split, len(ids) - split), []).append(i)
    rows = []
    for (split, _), group in groups.items():
        for start in range(0, len(group), batch_size):
            chunk = group[start : start + batch_size]
            ids = torch.tensor([a_ids[i] for i in chunk], device=hm.device)
            context, question = ids[:, :split], ids[:, split:]
            _, cache_a = prefill(hm, context)
            _, cache_n = prefill(hm, _neutral_ids(hm, rng, context.shape))
            state_b = context_states(hm, [b_ids[i][: b_splits[i]] for i in chunk], batch_size)
            cues = [token_positions(items[i], offsets[i], "cues") for i in chunk]
            for condition, edit in CONDITIONS.items():
                cache = edit(hm, cache_a, cache_n, state_b, cues)
                tokens, _ = greedy(hm, question, n_new, cache=cache, start=split)
                rows += [
                    _row(hm, lexicon, stop, items[i], i, seed, condition, t)
                    for i, t in zip(chunk, tokens.tolist(), strict=True)
                ]
    bare = [it.partners["bare"] for it in items]
    for chunk, ids, _ in batches_by_length(hm, bare, batch_size):
        tokens, _ = greedy(hm, ids, n_new)
        rows += [
            _row(hm, lexicon, stop, items[i], i, seed, BASELINE, t) for i, t in zip(chunk, tokens.tolist(), strict=True)
        ]
    order = {c: k for k, c in enumerate([*CONDITIONS, BASELINE])}
    return sorted(rows, key=lambda r: (r["item"], order[r["condition"]]))


def context_states(hm, contexts, batch_size: int) -> dict:
    """{site: states [len(contexts), ...]} after prefilling each context (token id lists of any lengths),
    in batches of one length, gathered back in the contexts' order."""
    parts, where = [], []
    by_length = {}
    for i, ids in enumerate(contexts):
        by_length.setdefault(len(ids), []).append(i)
    for group in by_length.values():
        for start in range(0, len(group), batch_size):
            chunk = group[start : start + batch_size]
            _, cache = prefill(hm, torch.tensor([contexts[i] for i in chunk], device=hm.device))
            parts.append(states(hm, cache))
            where += chunk
    back = torch.tensor(np.argsort(where), device=hm.device)
    return {site: torch.cat([p[site] for p in parts]).index_select(0, back) for site in parts[0]}


def _neutral_ids(hm, rng, shape):
    ids = [hm.token_id(w) for w in hm.single_token_words(list(NEUTRAL_WORDS))]
    return torch.tensor([[rng.choice(ids) for _ in range(shape[1])] for _ in range(shape[0])], device=hm.device)


def _stop_ids(hm) -> set:
    """The tokens that end a turn: the tokenizer's end of sequence and the chat templates' end markers."""
    stop = {hm.tokenizer.eos_token_id, *hm.tokenizer.convert_tokens_to_ids(["<|im_end|>", "<|endoftext|>"])}
    return stop - {None, hm.tokenizer.unk_token_id}


def _generated(hm, tokens, stop) -> str:
    """The generation up to the model's end of turn."""
    ends = [k for k, t in enumerate(tokens) if t in stop]
    return hm.tokenizer.decode(tokens[: ends[0]] if ends else tokens, skip_special_tokens=True).strip()


def _row(hm, lexicon, stop, a, index: int, seed: int, condition: str, tokens) -> dict:
    return {"seed": seed, "item": index, "condition": condition, **score(lexicon, a, _generated(hm, tokens, stop))}


def score(lexicon, a, generated: str) -> dict:
    """The metrics and sources of one generation for item `a` (its swap partner is B)."""
    b = a.partners["swap"]
    # A user's values the lexicon does not know are read as whole words, in their context's language.
    extra = {v: (v, it.language) for it in (b, a) for v in it.concepts if v.casefold() not in lexicon.forms}
    named = lexicon.concepts(generated, extra)
    language, confidence = lexicon.language(generated)
    counts = lexicon.persona_counts(generated)
    n_words = len(lexicon.words(generated))
    nan = float("nan")  # an item that sets no language or no persona has no such metric
    return {
        "generated": generated,
        "expected": a.answer,
        "language_of_a": a.language,
        "persona_of_a": a.persona,
        # Content only: the asked value in any language, since the language is scored as style.
        "retrieval": int(any(c == a.concept for c, _ in named)),
        "language": int(language == a.language) if a.language else nan,
        "language_confidence": confidence,
        "persona": (counts.get(a.persona, 0) / n_words if n_words else 0.0) if a.persona else nan,
        "in_context": int(bool(named) and named[0][0] in a.concepts),
        "content_source": content_source(named[0] if named else None, a, b),
        "language_source": _source(language, a.language, b.language),
        "persona_source": _source(_dominant(counts), a.persona, b.persona),
        "identified_language": language,
    }


def content_source(named, a, b) -> str:
    """Where the first value a generation names comes from (CONTENT_SOURCES)."""
    if named is None:
        return "none"
    concept, language = named
    for name, item in (("A", a), ("B", b)):
        if concept == item.concept:
            return name if language == item.language else f"{name}_related"
    for name, item in (("A_dict", a), ("B_dict", b)):
        if concept in item.concepts:
            return name
    return "other"


def _dominant(counts: dict) -> str:
    best = max(counts.values(), default=0)
    tied = [p for p, n in counts.items() if n == best]
    return tied[0] if best and len(tied) == 1 else ""


def _source(value, a, b) -> str:
    return "none" if not value else "A" if value == a else "B" if value == b else "other"


def retention(rows, conditions=tuple(CONDITIONS), n_boot: int = 2000) -> list[dict]:
    """Per (condition, property): mean metric, retention = mean / mean under full, and over_baseline = mean /
    mean without a persona (the paper's "× its no-persona rate"), each with a 95 % paired bootstrap interval
    over items pooled over seeds."""
    by = {}
    for r in rows:
        by.setdefault(r["condition"], []).append(r)
    out = []
    for condition in conditions:
        cond, full, bare = by[condition], by["full"], by[BASELINE]
        assert [(r["seed"], r["item"]) for r in cond] == [(r["seed"], r["item"]) for r in full]
        assert [(r["seed"], r["item"]) for r in cond] == [(r["seed"], r["item"]) for r in bare]
        seeds = sorted({r["seed"] for r in cond})
        for prop in PROPERTIES:
            values = np.array([[f[prop], c[prop], n[prop]] for f, c, n in zip(full, cond, bare, strict=True)])
            m_lo, m_hi = bootstrap(values[:, 1], np.mean, n_boot=n_boot)
            r_lo, r_hi = bootstrap(values[:, :2], _ratio, n_boot=n_boot)
            b_lo, b_hi = bootstrap(values[:, [2, 1]], _ratio, n_boot=n_boot)
            per_seed = [np.mean([c[prop] for c in cond if c["seed"] == s]) for s in seeds]
            out.append(
                {
                    "condition": condition,
                    "property": prop,
                    "n": len(cond),
                    "metric": values[:, 1].mean(),
                    "metric_lo": m_lo,
                    "metric_hi": m_hi,
                    "retention": _ratio(values[:, :2]),
                    "retention_lo": r_lo,
                    "retention_hi": r_hi,
                    "baseline": values[:, 2].mean(),
                    "over_baseline": _ratio(values[:, [2, 1]]),
                    "over_baseline_lo": b_lo,
                    "over_baseline_hi": b_hi,
                    "per_seed": ",".join(f"{v:.3f}" for v in per_seed),
                }
            )
    return out


def _ratio(pair):
    """Mean of the second column over the mean of the first."""
    reference = pair[:, 0].mean()
    return pair[:, 1].mean() / reference if reference > 0 else float("nan")


def attribution(rows) -> list[dict]:
    """State-swap outputs counted by (content source, style channel, style source)."""
    swap = [r for r in rows if r["condition"] == "state_swap"]
    out = []
    for style in ("language", "persona"):
        for content in CONTENT_SOURCES:
            for source in SOURCES:
                count = sum(r["content_source"] == content and r[f"{style}_source"] == source for r in swap)
                out.append(
                    {
                        "style": style,
                        "content_source": content,
                        "style_source": source,
                        "count": count,
                        "fraction": count / len(swap) if swap else float("nan"),
                    }
                )
    return out


SAMPLE_COLUMNS = (
    "item",
    "condition",
    "language_of_a",
    "persona_of_a",
    "expected",
    "generated",
    "identified_language",
    "language",
    "persona",
    "content_source",
)


def samples(rows, n: int) -> list[dict]:
    """The first seed's first `n` items under every condition, with the verdicts a reader checks them by."""
    first = min((r["seed"] for r in rows), default=0)
    return [{k: r[k] for k in SAMPLE_COLUMNS} for r in rows if r["seed"] == first and r["item"] < n]
