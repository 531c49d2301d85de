"""Dictionary-retrieval prompts, generated from a seed.

Prompt                one item: text, answer, style (language, persona) and character spans of its parts
make_prompts          n seeded prompts in one format
clean_corrupt_pairs   (clean, corrupt): target value swapped with a distractor's; two positions differ
donor_host_pairs      (donor, host): same dictionary, different queried key
answer_word           the word a format's answer is: a value's form in the context's language (FUSED_FORMATS: and
                      persona)
token_roles           every token's role (TOKEN_ROLES)
FORMATS               the three copy formats, chat, list and rev: the answer is a word of the dictionary
TASK_FORMATS          FORMATS, translate (the dictionary in language 0, the answer in the context's language),
                      translate_late (translate with the persona line and the language's header word after
                      the dictionary), translate_fused (translate_late with the persona in the answer word itself)
                      hop (two tables, key -> link and link -> value: the answer takes two lookups)
                      notes (chat with a second, never-asked table of NOTES times as many other entries
                      before the question) and fused_notes (translate_fused with that table before its style cues)
FUSED_FORMATS         the formats answered with one word in the context's language and persona
"""

import random
from dataclasses import dataclass, field
from pathlib import Path

from hybridlens.tasks.vocab import KEYS, PERSONAS, VALUES, fused_word, language_forms

FORMATS = ("chat", "list", "rev")
# In `translate` only the header word carries the context's language, so the answer's language is
# produced, not copied: a style free to travel in another channel than the value.
# `translate_late` moves both style cues after the dictionary: linear layers write a preceding cue into
# every dictionary token, where the KV cache stores it, so only a cue that comes later can be state-only.
# `translate_fused` writes the answer as one word that carries the value, the language and the persona, so the
# persona is produced at the position where attention reads the value, not at a later one where it is free.
# In `hop` the first table maps each key to a link word and the second, in another order, maps the link
# to the value: no single lookup answers, so the query for the second must be built from the first's result.
# `notes` puts a second table of other keys between the dictionary and the question, never asked about: a
# linear layer's state that holds every entry it reads must hold NOTES times more, while attention can skip
# them. The table grows with the dictionary, so the curriculum's first stage stays short.
# `fused_notes` is translate_fused with the notes before the style cues: the content pushed out of the states,
# the style cues still last, for the state to carry.
FUSED_FORMATS = ("translate_fused", "fused_notes")
TRANSLATE_FORMATS = ("translate", "translate_late", *FUSED_FORMATS)
TASK_FORMATS = (*FORMATS, *TRANSLATE_FORMATS, "hop", "notes")
# The paper's protocol for chat models (tasks.items.turns): the user turn holds the dictionary and the question,
# the assistant turn is prefilled up to the answer, which follows `**`. `perm` is chat with the queried entry
# at every position in turn; `long` is chat after filler text. Toys render every format but long word by word.
FRAMINGS = ("toy", "paper")
PAPER_FORMATS = (*FORMATS, "perm", "long")
TOY_FORMATS = (*TASK_FORMATS, "perm")
ALL_FORMATS = tuple(dict.fromkeys(TOY_FORMATS + PAPER_FORMATS))
NOTES = 2


def hop_links(pairs) -> tuple[list[str], list[int]]:
    """Each entry's link word and the second table's entry order in a `hop` prompt.

    Drawn from the dictionary's keys, so prompts over one dictionary (donor and host, clean and corrupt)
    share both, while across dictionaries they are as good as random. Links are KEYS not in the dictionary.
    """
    keys = [k for k, _ in pairs]
    rng = random.Random(" ".join(keys))
    links = rng.sample([k for k in KEYS if k not in keys], len(keys))
    order = list(range(len(keys)))
    rng.shuffle(order)
    return links, order


def notes_table(pairs) -> list[tuple[str, str]]:
    """The NOTES * len(pairs) (key, value concept) entries of a `notes` prompt's second table, drawn from the
    dictionary's keys as hop_links does, so prompts over one dictionary share them. Its keys and values are none
    of the dictionary's, so an answer from the notes is told apart from one from the dictionary."""
    n = NOTES * len(pairs)
    if len(pairs) + n > min(len(KEYS), len(VALUES)):
        most = min(len(KEYS), len(VALUES)) // (NOTES + 1)
        raise ValueError(
            f"format notes: {len(pairs)} pairs and their {n} notes need more keys and values than "
            f"the task has; use at most {most} pairs"
        )
    keys, values = {k for k, _ in pairs}, {v for _, v in pairs}
    rng = random.Random("notes " + " ".join(k for k, _ in pairs))
    return list(
        zip(
            rng.sample([k for k in KEYS if k not in keys], n),
            rng.sample([v for v in VALUES if v not in values], n),
            strict=True,
        )
    )


@dataclass(frozen=True)
class Prompt:
    """One retrieval item. Spans are (start, end) character offsets into `text`."""

    text: str
    answer: str  # the queried value, in the context's language
    marker: str  # the persona's style token, expected right after the answer
    fmt: str
    language: int
    persona: str | None  # None: no persona line
    pairs: tuple[tuple[str, str], ...]  # (key, value concept), in context order
    query: int  # index into pairs of the queried entry
    spans: dict[str, tuple[int, int]] = field(compare=False)
    choices: tuple[str, ...] = ()  # every entry's answer word, in pairs order
    system: str = ""
    prefill: str = ""
    lead: str = " "  # the answer is the next word
    framing: str = "toy"
    filler: str = ""

    @property
    def target(self) -> str:
        return self.answer + " " + self.marker


def _render(fmt, pairs, query, language, persona, forms):
    """Build the text word by word, recording the character span of every entry part, and of the style cues:
    the persona line and the header that follows it, which names the context's language (rev has none)."""
    f = forms[language]
    late = fmt in ("translate_late", *FUSED_FORMATS)
    values = forms[0] if fmt in TRANSLATE_FORMATS else f
    words, spans = [], {}

    def here():
        return sum(len(w) + 1 for w in words)

    def put(word, name=None):
        start = here()
        words.append(word)
        if name:
            spans[name] = (start, start + len(word))
        return start

    def persona_line():
        if persona is None:  # no persona: the cues are the header alone
            return here()
        start = put("Persona")
        put(":")
        put(persona, "persona")
        put(".")
        return start

    def end_cues():
        spans["cues"] = (cues, here() - 1)

    cues = None if late else persona_line()
    if fmt == "rev":
        end_cues()
        for i, (k, v) in enumerate(pairs):
            put(values[v], f"value{i}")
            for w in ("is", "the", "value", "of"):
                put(w)
            put(k, f"key{i}")
            put("," if i < len(pairs) - 1 else ".")
    elif fmt == "hop":
        links, order = hop_links(pairs)
        for w in (f["Dictionary"], ":"):
            put(w)
        end_cues()
        for i, (k, _) in enumerate(pairs):
            put(k, f"key{i}")
            put("=")
            put(links[i], f"link{i}")
            put("," if i < len(pairs) - 1 else ".")
        for w in (f["Lookup"], f["table"], ":"):
            put(w)
        for n, i in enumerate(order):
            put(links[i], f"linkkey{i}")
            put("=")
            put(values[pairs[i][1]], f"value{i}")
            put("," if n < len(pairs) - 1 else ".")
    else:
        header = [f["Lookup"], f["table"], ":"] if fmt == "list" else [(forms[0] if late else f)["Dictionary"], ":"]
        for w in header:
            put(w)
        if not late:
            end_cues()
        for i, (k, v) in enumerate(pairs):
            if fmt == "list":
                put("*")
            put(k, f"key{i}")
            put("=")
            put(values[v], f"value{i}")
            if fmt != "list":
                put("," if i < len(pairs) - 1 else ".")
    if fmt in ("notes", "fused_notes"):
        # a header word every toy tokenizer holds, so shipped toys keep their vocabulary; in language 0 where
        # the style cues come late
        put((forms[0] if late else f)["table"])
        put(":")
        notes = notes_table(pairs)
        for i, (k, v) in enumerate(notes):
            for w in (k, "=", values[v], "," if i < len(notes) - 1 else "."):
                put(w)
    if late:
        cues = persona_line()
        for w in (f["Lookup"], ":"):
            put(w)
        end_cues()
    q_words = question_words(fmt, pairs[query][0])
    q_start = put(q_words[0])
    for w in q_words[1:]:
        put(w, "query" if w == pairs[query][0] else None)
    text = " ".join(words)
    spans["question"] = (q_start, len(text))
    spans["final"] = (len(text) - 1, len(text))
    return text, spans


def answer_word(fmt: str, forms, language: int, persona: str, concept: str) -> str:
    """The word that answers a question about `concept` in a prompt of this format, language and persona."""
    form = forms[language][concept]
    return fused_word(form, persona) if fmt in FUSED_FORMATS and persona else form


def question_words(fmt: str, key: str) -> list[str]:
    """The question, ending right before the answer (language-neutral, so it carries no style)."""
    if fmt == "list":
        return ["Which", "value", "does", key, "map", "to", "?"]
    return ["Question", ":", "What", "is", "the", "value", "of", key, "?"]


def make_prompt(
    pairs, query, fmt="chat", language=0, persona="pirate", n_languages=2, framing="toy", filler=""
) -> Prompt:
    """A prompt from an explicit dictionary; `pairs` are (key, value concept); persona None: no persona line.

    framing "toy": the toy zoo's word-per-token rendering (every format); "paper": the paper's chat protocol
    (PAPER_FORMATS; language 0, no persona line) with `filler` text before the dictionary in format long.
    """
    if framing not in FRAMINGS:
        raise ValueError(f"unknown framing {framing!r}; use one of {FRAMINGS}")
    formats = PAPER_FORMATS if framing == "paper" else TOY_FORMATS
    if fmt not in ALL_FORMATS:
        raise ValueError(f"unknown task format {fmt!r}; use one of {ALL_FORMATS}")
    if fmt not in formats:
        raise ValueError(f"format {fmt!r} has no {framing} framing; use one of {formats}")
    forms = language_forms(n_languages)
    choices = tuple(answer_word(fmt, forms, language, persona, v) for _, v in pairs)
    prefill, lead = "", " "
    if framing == "paper":
        text, prefill, spans = _render_paper(fmt, [(k, choices[i]) for i, (k, _) in enumerate(pairs)], query, filler)
        lead = ""
    else:
        text, spans = _render("chat" if fmt == "perm" else fmt, pairs, query, language, persona, forms)
    fields = (
        text,
        choices[query],
        PERSONAS[persona] if persona else "",
        fmt,
        language,
        persona,
        tuple(pairs),
        query,
        spans,
    )
    return Prompt(*fields, choices, prefill=prefill, lead=lead, framing=framing, filler=filler)


def like(prompt: Prompt, pairs, query: int, n_languages: int = 2) -> Prompt:
    """A prompt over other pairs (or another queried entry) in `prompt`'s format, style, framing and filler."""
    return make_prompt(
        pairs, query, prompt.fmt, prompt.language, prompt.persona, n_languages, prompt.framing, prompt.filler
    )


# The paper's question and prefill around the queried key: (question, its end, (prefill before, after the key)).
PAPER_QUESTIONS = {
    "chat": ("Question: What is the value of ", "?", ("The value of ", " is **")),
    "list": ("Which value does ", " map to?", ("The entry ", " maps to **")),
}


def _render_paper(fmt, entries, query, filler):
    """(user turn, assistant prefill, spans) in the paper's protocol. Spans index user + "\n" + prefill
    (tasks.items.turns(...).joined); entries are (key, value word)."""
    parts, spans = [], {}

    def put(text, name=None):
        start = sum(map(len, parts))
        parts.append(text)
        if name:
            spans[name] = (start, start + len(text))

    if filler:
        put(filler, "filler")
        put("\n\n")
    key = entries[query][0]
    if fmt == "list":
        put("Lookup table:")
        for i, (k, v) in enumerate(entries):
            put("\n* ")
            put(k, f"key{i}")
            put("=")
            put(v, f"value{i}")
    else:
        put("Dictionary: ")
        for i, (k, v) in enumerate(entries):
            if fmt == "rev":
                put(v, f"value{i}")
                put(" is the value of ")
                put(k, f"key{i}")
            else:
                put(k, f"key{i}")
                put("=")
                put(v, f"value{i}")
            put(", " if i < len(entries) - 1 else ".")
    put("\n")
    q_start = sum(map(len, parts))
    ask, asked, prefill = PAPER_QUESTIONS["list" if fmt == "list" else "chat"]
    put(ask)
    put(key, "query")
    put(asked)
    prefill = [prefill[0], key, prefill[1]]
    text = "".join(parts)
    at = len(text) + 1  # the prefill follows the user turn and a newline in the joined turns
    spans["prefill_key"] = (at + len(prefill[0]), at + len(prefill[0]) + len(key))
    prefill = "".join(prefill)
    spans["question"] = (q_start, at + len(prefill))
    spans["final"] = (at + len(prefill) - 1, at + len(prefill))
    return text, prefill, spans


def sample_dictionary(rng: random.Random, n_pairs: int, keys=KEYS, values=VALUES):
    return list(zip(rng.sample(list(keys), n_pairs), rng.sample(list(values), n_pairs), strict=True))


def make_prompts(
    seed: int,
    n: int,
    n_pairs: int,
    fmt: str = "chat",
    n_languages: int = 2,
    languages=None,
    personas=None,
    keys=KEYS,
    values=VALUES,
    framing: str = "toy",
    filler: str = "",
) -> list[Prompt]:
    """`n` prompts; language and persona are drawn uniformly from the given lists (default: all; the paper
    framing has language 0 only). In format perm the i-th prompt asks its entry i mod n_pairs, so every
    position of the target is swept; `filler` stands before the dictionary (format long)."""
    rng = random.Random(seed)
    languages = list(range(n_languages)) if languages is None else list(languages)
    languages = [0] if framing == "paper" else languages
    personas = list(PERSONAS) if personas is None else list(personas)
    if (fmt == "long") != bool(filler):
        raise ValueError("format long needs filler text, and only format long takes it")
    out = []
    for i in range(n):
        pairs = sample_dictionary(rng, n_pairs, keys, values)
        query = rng.randrange(n_pairs)
        query = i % n_pairs if fmt == "perm" else query
        style = (rng.choice(languages), rng.choice(personas))
        out.append(make_prompt(pairs, query, fmt, *style, n_languages, framing, filler))
    return out


# Plain sentences for the filler of format long; none holds a key or value word (a test checks).
FILLER = """
The morning was quiet and the streets were almost empty.
A few people waited at the corner for the bus to arrive.
Someone had left a newspaper on the bench near the station.
The weather report said that the afternoon would be calm.
In the library, students read in silence at the long desks.
An old clock above the entrance struck the hour twice.
The baker opened the shop a little later than usual.
Children walked to school in small groups, talking loudly.
A delivery van stopped in front of the post office.
The museum announced a new exhibition for the coming month.
Two friends met for coffee and talked about their plans.
The town council discussed the repairs of the main square.
""".strip().splitlines()


def filler_text(n_words: int, seed: int = 0, path=None) -> str:
    """About n_words words of filler (whole sentences, at least n_words): sentences drawn in a seeded order
    from FILLER, or the text of a user's file (cut at a sentence end past n_words, or all of it)."""
    if path is not None:
        text = " ".join(Path(path).read_text().split())
        if not text:
            raise ValueError(f"filler file {path} is empty")
        words = text.split(" ")
        cut = next((i + 1 for i in range(n_words - 1, len(words)) if words[i].endswith((".", "!", "?"))), len(words))
        return " ".join(words[:cut])
    rng, out = random.Random(seed), []
    while sum(len(s.split()) for s in out) < n_words:
        out += rng.sample(FILLER, len(FILLER))
    words = 0
    for i, sentence in enumerate(out):
        words += len(sentence.split())
        if words >= n_words:
            return " ".join(out[: i + 1])
    return " ".join(out)


def clean_corrupt_pairs(prompts: list[Prompt], seed: int, n_languages: int = 2):
    """Corrupt = the target's value swapped with a random distractor's; the answer becomes the distractor's."""
    rng = random.Random(seed)
    out = []
    for p in prompts:
        j = rng.choice([i for i in range(len(p.pairs)) if i != p.query])
        pairs = list(p.pairs)
        (kq, vq), (kj, vj) = pairs[p.query], pairs[j]
        pairs[p.query], pairs[j] = (kq, vj), (kj, vq)
        out.append((p, like(p, pairs, p.query, n_languages)))
    return out


def donor_host_pairs(prompts: list[Prompt], seed: int, n_languages: int = 2):
    """Donor asks the prompt's key A; host asks another key B of the same dictionary."""
    rng = random.Random(seed)
    out = []
    for p in prompts:
        b = rng.choice([i for i in range(len(p.pairs)) if i != p.query])
        out.append((p, like(p, list(p.pairs), b, n_languages)))
    return out
