"""The dictionary task as a plug-in: its config keys, their check, and its items for one model
(tasks.prompt_sets.prompt_set; the prompts themselves are tasks.retrieval's).

DEFAULTS  config keys of a dictionary task and their defaults
check     refuse a format, framing or filler that cannot run, in one line (parse time, no torch)
items     (prompts, counts) over the words that are single tokens for the model's tokenizer
"""

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


def items(hm, spec: dict, n_languages: int):
    from hybridlens.tasks.prompt_sets import prompt_set

    return prompt_set(hm, spec, n_languages)
