"""Prompt sets of the dictionary task over the words a model's tokenizer keeps as single tokens.

vocabulary         keys, value concepts and languages whose words are single tokens for the model's tokenizer
prompt_set         a task's prompts over that vocabulary
"""

import weakref

from hybridlens.interventions.on_items import answer_tokens
from hybridlens.tasks.items import token_positions, turns
from hybridlens.tasks.retrieval import filler_text, make_prompt, make_prompts
from hybridlens.tasks.vocab import EXTRA_KEYS, KEYS, VALUES, language_forms


def framing(hm, task: dict) -> str:
    """A task's framing on `hm`: its `framing` key, or by default the paper's protocol for a model whose
    tokenizer has a chat template and the toy rendering for one without (the toy zoo)."""
    chosen = task.get("framing", "auto")
    return ("paper" if hm.has_chat_template else "toy") if chosen == "auto" else chosen


def vocabulary(hm, n_pairs: int, framing: str = "toy", fmt: str = "chat"):
    """(keys, value concepts, languages, counts) whose words are single tokens for `hm`'s tokenizer
    (all of them for the toy tokenizer; a subset for real ones); in the paper framing, single tokens where
    they stand in a prompt of `fmt` (in_context_words), in language 0."""
    if framing == "paper":
        keys, values = in_context_words(hm, fmt)
        counts = {"keys": len(keys), "values": len(values), "languages": 1}
        if min(len(keys), len(values)) < n_pairs:
            raise ValueError(
                f"tokenizer of {hm.source}: {counts['keys']} keys and {counts['values']} values are single tokens "
                f"where they stand in format {fmt}, too few for {n_pairs}-pair dictionaries; use fewer pairs"
            )
        return keys, values, [0], counts
    forms = language_forms(hm.n_languages)
    keys = hm.single_token_words(KEYS + EXTRA_KEYS)
    languages, values, most = [], list(VALUES), 0
    for i, f in enumerate(forms):  # add a language only while enough concepts stay single tokens in all
        kept = [v for v in values if hm.single_token_words([f[v]])]
        most = max(most, len(kept))
        if len(kept) >= n_pairs:
            languages, values = [*languages, i], kept
    # Without a kept language, the most values any one language keeps (not the unfiltered list).
    counts = {"keys": len(keys), "values": len(values) if languages else most, "languages": len(languages)}
    if not languages or len(keys) < n_pairs:  # a kept language already guarantees n_pairs values
        raise ValueError(
            f"tokenizer of {hm.source}: single-token words {counts} are too few for {n_pairs}-pair dictionaries; "
            "use fewer pairs in the task"
        )
    return keys, values, languages, counts


_IN_CONTEXT = weakref.WeakKeyDictionary()  # tokenizer -> {format: words}; a tokenizer's words never change


def in_context_words(hm, fmt: str = "chat") -> tuple[list[str], list[str]]:
    """(keys, value concepts) that are one token wherever they stand in a paper-framed prompt of `fmt`: a key
    as the first and the last entry's key, in the question and in the prefill; a value as the first and the
    last entry's value, and as the answer after the prefill. So clean and corrupt prompts differ at exactly the
    two value tokens and every answer's logit is read at the final position, whatever the tokenizer."""
    fmt = fmt if fmt in ("list", "rev") else "chat"  # perm and long render entries and question as chat
    known = _IN_CONTEXT.setdefault(hm.tokenizer, {})
    if fmt not in known:
        known[fmt] = _in_context_words(hm, fmt)
    return known[fmt]


def _in_context_words(hm, fmt):
    probes = []
    for word, role in [(k, "key") for k in KEYS + EXTRA_KEYS] + [(v, "value") for v in VALUES]:
        pairs = [(word, "fire"), ("x", "ice")] if role == "key" else [("x", word), ("y", "ice")]
        for first in (True, False):
            probe = make_prompt(pairs if first else pairs[::-1], 0 if first else 1, fmt, framing="paper")
            probes.append((word, role, probe, "0" if first else "1"))
    _, offsets = hm.tokenize([turns(p) for _, _, p, _ in probes])
    answers = answer_tokens(hm, [p for _, _, p, _ in probes], strict=False)
    ok = {}
    for (word, role, probe, entry), off, choice in zip(probes, offsets, answers, strict=True):
        names = [role + entry] + (["query", "prefill_key"] if role == "key" else [])
        spans = [token_positions(probe, off, n) for n in names]
        others = {
            i
            for n in probe.spans
            if n.startswith(("key", "value")) and n not in names
            for i in token_positions(probe, off, n)
        }
        single = all(len(s) == 1 and not set(s) & others for s in spans)
        answer = role == "key" or (choice[int(entry)] is not None and len(choice[int(entry)]) == 1)
        ok[word, role] = ok.get((word, role), True) and single and answer
    keys = [k for k in KEYS + EXTRA_KEYS if ok[k, "key"]]
    return keys, [v for v in VALUES if ok[v, "value"]]


def prompt_set(hm, task: dict):
    """(prompts, counts): the task's prompts over single-token keys, value concepts and languages, in the
    task's framing on this model (framing)."""
    n_pairs, fmt, chosen = task["n_pairs"], task["format"], framing(hm, task)
    keys, values, languages, counts = vocabulary(hm, n_pairs, chosen, fmt)
    filler = ""
    if fmt == "long":
        filler = filler_text(task.get("filler_words", 256), task["seed"], task.get("filler_file") or None)
    prompts = make_prompts(
        task["seed"],
        task["n"],
        n_pairs,
        fmt,
        hm.n_languages,
        languages,
        keys=keys,
        values=values,
        framing=chosen,
        filler=filler,
    )
    return prompts, counts
