"""Split-prefill and state-swap: what the KV cache and the recurrent state each carry.

Each item is a context A (persona line + dictionary, in one toy language) and the question. A is
prefilled; its cache is edited by one of the CONDITIONS (interventions/cache.py); the question is
continued from the edited cache and n_new tokens are generated greedily at the full prompt's positions.

Content is *which value* comes out; style is *how*: the language the value is written in and the
persona's marker after it (a fused format: the persona the answer word is written in). For the
state-swap, context B has the same keys in the same order but other values, another language and
another persona, so every output can be attributed: its content to A (the KV side) or B (the state
side), its language and persona to A or B.

make_items     seeded items: context A, swap partner B, a neutral context of the same length
run_items      generations and per-item metrics under every condition
retention      metric under each condition / metric with the full cache, with bootstrap intervals
attribution    the state-swap table: content source x style source
"""

import random
from dataclasses import dataclass

import numpy as np
import torch

from hybridlens.interventions.cache import CONDITIONS, greedy, prefill
from hybridlens.stats import bootstrap
from hybridlens.tasks.items import token_positions, turns
from hybridlens.tasks.prompt_sets import vocabulary
from hybridlens.tasks.retrieval import FUSED_FORMATS, Prompt, make_prompt, make_prompts
from hybridlens.tasks.vocab import NEUTRAL, PERSONAS, fused_words, language_forms

PROPERTIES = ("retrieval", "language", "persona")
SOURCES = ("A", "B", "other")
# Content also tells a wrong entry of either dictionary apart from a value in neither.
CONTENT_SOURCES = ("A", "B", "A_dict", "B_dict", "other")


@dataclass
class Item:
    seed: int
    index: int
    a: Prompt
    b: Prompt  # same keys in the same order; other values, language and persona


def make_items(hm, seed: int, n: int, n_pairs: int, fmt: str, n_languages: int) -> list[Item]:
    keys, values, languages, _ = vocabulary(hm, n_pairs, n_languages)
    if len(languages) < 2 or len(values) < 2 * n_pairs:
        raise ValueError(
            f"tokenizer of {hm.source}: the state-swap needs two languages and {2 * n_pairs} single-token values; "
            f"it has {len(languages)} and {len(values)}; use fewer pairs"
        )
    rng = random.Random(seed + 7919)
    items = []
    for i, a in enumerate(make_prompts(seed, n, n_pairs, fmt, n_languages, languages, keys=keys, values=values)):
        used = {v for _, v in a.pairs}
        b_values = rng.sample([v for v in values if v not in used], n_pairs)
        b_pairs = [(k, v) for (k, _), v in zip(a.pairs, b_values, strict=True)]
        language = rng.choice([g for g in languages if g != a.language])
        persona = rng.choice([p for p in PERSONAS if p != a.persona])
        items.append(Item(seed, i, a, make_prompt(b_pairs, a.query, fmt, language, persona, n_languages)))
    return items


def _neutral_ids(hm, rng, shape):
    words = hm.single_token_words([w for w in NEUTRAL if w.isalpha()])
    ids = [hm.token_id(w) for w in words]
    return torch.tensor([[rng.choice(ids) for _ in range(shape[1])] for _ in range(shape[0])], device=hm.device)


class Decoder:
    """Reads generated token ids as (concept, language) of a value, and persona markers; a fused answer word
    (a fused format) also as its persona."""

    def __init__(self, hm, n_languages: int, markers: dict[str, list[str]]):
        self.value = {}  # token id -> (concept, language)
        self.fused_persona = {}  # token id -> persona
        forms = language_forms(n_languages)
        words = [(form, concept, lang, None) for lang, t in enumerate(forms) for concept, form in t.items()]
        words += [(w, *meaning) for w, meaning in fused_words(n_languages).items()]
        for word, concept, lang, persona in words:
            ids = hm.tokenizer(" " + word, add_special_tokens=False)["input_ids"]
            if len(ids) == 1 and ids[0] != hm.tokenizer.unk_token_id:
                self.value[ids[0]] = (concept, lang)
                if persona:
                    self.fused_persona[ids[0]] = persona
        self.markers = {
            p: {hm.tokenizer(" " + w, add_special_tokens=False)["input_ids"][0] for w in ws}
            for p, ws in markers.items()
        }

    def persona_of(self, tokens) -> str | None:
        """The persona whose marker comes first among `tokens` (the generation after the answer)."""
        for t in tokens:
            for persona, ids in self.markers.items():
                if t in ids:
                    return persona
        return None


def _source(value, a, b):
    return "A" if value == a else "B" if value == b else "other"


def _content_source(concept, a: Prompt, b: Prompt):
    """A / B: the queried entry's value of that context; A_dict / B_dict: another entry's value."""
    source = _source(concept, a.pairs[a.query][1], b.pairs[b.query][1])
    if source == "other":
        for name, p in (("A_dict", a), ("B_dict", b)):
            if concept in {v for _, v in p.pairs}:
                return name
    return source


@torch.no_grad()
def run_items(hm, items: list[Item], n_new: int, markers: dict, n_languages: int, batch_size: int = 32):
    """One row per (item, condition): generated text, the three metrics and the three sources."""
    decode = Decoder(hm, n_languages, markers)
    rng = random.Random(items[0].seed if items else 0)
    rows = []
    for start in range(0, len(items), batch_size):
        batch = items[start : start + batch_size]
        a_ids, offsets = hm.encode([turns(it.a) for it in batch])
        b_ids, _ = hm.encode([turns(it.b) for it in batch])
        if a_ids.shape != b_ids.shape:
            raise ValueError("contexts A and B tokenize to different lengths; the swap needs one length")
        split = token_positions(batch[0].a, offsets[0], "question")[0]
        cues = token_positions(batch[0].a, offsets[0], "cues")
        if any(token_positions(it.a, o, "cues") != cues for it, o in zip(batch, offsets, strict=True)):
            raise ValueError(
                "the style cues of one batch stand at different token positions; set split_prefill.batch_size to 1"
            )
        context, question = a_ids[:, :split], a_ids[:, split:]
        _, cache_a = prefill(hm, context)
        _, cache_b = prefill(hm, b_ids[:, :split])
        _, cache_n = prefill(hm, _neutral_ids(hm, rng, context.shape))
        for condition, edit in CONDITIONS.items():
            tokens, _ = greedy(hm, question, n_new, cache=edit(hm, cache_a, cache_n, cache_b, cues), start=split)
            for it, toks in zip(batch, tokens.tolist(), strict=True):
                rows.append(_row(hm, decode, it, condition, toks))
    return rows


def _row(hm, decode, it: Item, condition: str, toks: list[int]) -> dict:
    a, b = it.a, it.b
    concept, lang = decode.value.get(toks[0], (None, None))
    # In a fused format the persona is the answer word's own; otherwise the first marker after it.
    persona = decode.fused_persona.get(toks[0]) if a.fmt in FUSED_FORMATS else decode.persona_of(toks[1:])
    in_context = concept is not None and concept in {v for _, v in a.pairs}
    return {
        "seed": it.seed,
        "item": it.index,
        "condition": condition,
        "generated": hm.tokenizer.decode(toks).strip(),
        "expected": a.target,
        # Content only: the queried value in any language, since the language is scored as style.
        "retrieval": int(concept == a.pairs[a.query][1]),
        "language": int(lang == a.language),
        "persona": int(persona == a.persona),
        "in_context": int(in_context),
        "content_source": _content_source(concept, a, b),
        "language_source": _source(lang, a.language, b.language),
        "persona_source": _source(persona, a.persona, b.persona),
    }


def retention(rows, conditions=tuple(CONDITIONS), n_boot: int = 2000):
    """Per (condition, property): mean metric, retention = mean / mean under full, 95 % bootstrap intervals.

    Items are resampled jointly for the condition and the full cache (paired), pooled over seeds.
    """
    by = {}
    for r in rows:
        by.setdefault(r["condition"], []).append(r)
    out = []
    for condition in conditions:
        cond, full = by[condition], by["full"]
        assert [(r["seed"], r["item"]) for r in cond] == [(r["seed"], r["item"]) for r in full]
        for prop in PROPERTIES:
            pair = np.array([[f[prop], c[prop]] for f, c in zip(full, cond, strict=True)], dtype=float)
            ratio = _ratio
            lo, hi = bootstrap(pair, ratio, n_boot=n_boot)
            m_lo, m_hi = bootstrap(pair[:, 1], np.mean, n_boot=n_boot)
            seeds = sorted({r["seed"] for r in cond})
            per_seed = [np.mean([c[prop] for c in cond if c["seed"] == s]) for s in seeds]
            out.append(
                {
                    "condition": condition,
                    "property": prop,
                    "n": len(cond),
                    "metric": pair[:, 1].mean(),
                    "metric_lo": m_lo,
                    "metric_hi": m_hi,
                    "retention": ratio(pair),
                    "retention_lo": lo,
                    "retention_hi": hi,
                    "per_seed": ",".join(f"{v:.3f}" for v in per_seed),
                }
            )
    return out


def _ratio(pair):
    full = pair[:, 0].mean()
    return pair[:, 1].mean() / full if full > 0 else float("nan")


def attribution(rows):
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
