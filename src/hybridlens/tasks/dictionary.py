"""The dictionary task as a plug-in: its config keys, their check, and its items for one model
(tasks.prompt_sets.prompt_set; the prompts themselves are tasks.retrieval's).

DEFAULTS  config keys of a dictionary task and their defaults
check     refuse a format, framing or filler that cannot run, in one line (parse time, no torch)
items     (prompts, counts) over the words that are single tokens for the model's tokenizer
triples   the circuit's (donor, host, other) triples over those words
split_keys, split_prompts, run_prompts  stitching's prompts: keys split into a fit and a test part, over the
          words two models' tokenizers both keep whole
donor_host  (donor, host) pairs: the host asks another key of the donor's dictionary
"""

import random
from pathlib import Path

from hybridlens.tasks.retrieval import ALL_FORMATS, FRAMINGS, PAPER_FORMATS, TOY_FORMATS

DEFAULTS = {
    "format": "chat",
    "n_pairs": 8,
    "n": 64,
    "seed": 1,
    "framing": "auto",  # auto: the paper's protocol for a model with a chat template, the toy rendering without
    "filler_words": 256,  # format long: words of filler before the dictionary
    "filler_file": "",  # format long: take the filler from this text file instead of generating it
}


def check(spec: dict, where: str) -> None:
    if spec["format"] not in ALL_FORMATS:
        raise ValueError(f"{where}.format: {spec['format']!r} is not a format; use one of {ALL_FORMATS}")
    if spec["framing"] not in ("auto", *FRAMINGS):
        raise ValueError(f"{where}.framing: {spec['framing']!r}; use auto, toy or paper")
    only = {"paper": PAPER_FORMATS, "toy": TOY_FORMATS}.get(spec["framing"], ALL_FORMATS)
    if spec["format"] not in only:
        raise ValueError(f"{where}: format {spec['format']} has no {spec['framing']} framing; use one of {only}")
    if spec["filler_file"] and not Path(spec["filler_file"]).is_file():
        raise ValueError(f"{where}.filler_file: {spec['filler_file']} does not exist")
    if spec["filler_file"] and spec["format"] != "long":
        raise ValueError(f"{where}.filler_file: only format long reads filler; drop the key or use format long")
    if spec["format"] == "long" and spec["filler_words"] < 1 and not spec["filler_file"]:
        raise ValueError(f"{where}.filler_words: format long needs filler; give a positive number or filler_file")
    for key in ("n_pairs", "n"):
        if not isinstance(spec[key], int) or spec[key] < (2 if key == "n_pairs" else 1):
            raise ValueError(
                f"{where}.{key}: {spec[key]!r}; give an integer of at least {2 if key == 'n_pairs' else 1}"
            )


def items(hm, spec: dict):
    from hybridlens.tasks.prompt_sets import prompt_set

    return prompt_set(hm, spec)


def triples(hm, spec: dict):
    """spec["n"] triples seeded by spec["seed"] over the words that are single tokens for hm's tokenizer, in
    the spec's framing (auto: the paper's for a model with a chat template, prompt_sets.framing)."""
    from hybridlens.tasks.items import Triple
    from hybridlens.tasks.prompt_sets import framing, vocabulary
    from hybridlens.tasks.retrieval import donor_host_pairs, like, make_prompts

    seed, n, n_pairs, fmt = spec["seed"], spec["n"], spec["n_pairs"], spec["format"]
    chosen = framing(hm, spec)
    n_languages = hm.n_languages
    keys, values, languages, _ = vocabulary(hm, n_pairs, chosen, fmt)
    rng = random.Random(seed + 104729)
    base = make_prompts(seed, n, n_pairs, fmt, n_languages, languages, keys=keys, values=values, framing=chosen)
    out = []
    for i, (donor, host) in enumerate(donor_host_pairs(base, seed, n_languages)):
        key_a = donor.pairs[donor.query][0]
        rest_keys = rng.sample([k for k in keys if k not in {k for k, _ in donor.pairs}], n_pairs - 1)
        vals = rng.sample([v for v in values if v not in {v for _, v in donor.pairs}], n_pairs)
        pairs = list(zip(rest_keys, vals[1:], strict=True))
        slot = rng.choice([j for j in range(n_pairs) if j != donor.query] or [0])
        pairs.insert(slot, (key_a, vals[0]))
        other = like(donor, pairs, slot, n_languages)
        out.append(Triple(seed, i, donor, host, other))
    return out


def split_keys(receiver, donor, seed: int, test_fraction: float, n_pairs: int):
    """(fit keys, test keys, values, languages) over the words both tokenizers keep as single tokens."""
    from hybridlens.tasks.prompt_sets import vocabulary

    shared = []
    for hm in (receiver, donor):
        keys, values, languages, _ = vocabulary(hm, n_pairs)
        shared.append((set(keys), set(values), set(languages)))
    keys = sorted(shared[0][0] & shared[1][0])
    values = sorted(shared[0][1] & shared[1][1])
    languages = sorted(shared[0][2] & shared[1][2])
    keys = random.Random(seed).sample(keys, len(keys))
    n_test = round(len(keys) * test_fraction)
    fit, test = keys[n_test:], keys[:n_test]
    if min(len(fit), len(test), len(values)) < n_pairs or not languages:
        raise ValueError(
            f"stitching {receiver.source} and {donor.source}: {len(fit)} fit keys, {len(test)} test keys and "
            f"{len(values)} values shared as single tokens, too few for {n_pairs}-pair dictionaries; use fewer pairs"
        )
    return fit, test, values, languages


def split_prompts(split, seed: int, n: int, n_pairs: int, fmt: str, part: str):
    from hybridlens.tasks.retrieval import make_prompts

    fit, test, values, languages = split
    keys = fit if part == "fit" else test
    # A language's forms do not depend on how many are drawn (language_forms), so the split's own suffice.
    return make_prompts(seed, n, n_pairs, fmt, max(languages) + 1, languages, keys=keys, values=values)


def run_prompts(split, seed: int, settings: dict, part: str):
    """The `part` split's prompts of one run seed (config section stitch): n_fit fit prompts, or the n_test
    test prompts every reported number comes from, drawn from another stream than the fit prompts."""
    n, offset = (settings["n_fit"], 0) if part == "fit" else (settings["n_test"], 7919)
    return split_prompts(split, seed + offset, n, settings["n_pairs"], settings["format"], part)


def donor_host(prompts, seed: int):
    """(donor, host) per prompt: the prompt itself as the donor, and its dictionary asking another key."""
    from hybridlens.tasks.retrieval import donor_host_pairs

    return donor_host_pairs(prompts, seed, max(p.language for p in prompts) + 1)
