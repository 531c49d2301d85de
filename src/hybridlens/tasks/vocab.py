"""Word lists for the retrieval tasks.

KEYS: language-neutral query words. VALUES: concepts with one surface form per toy language
(language 0 is English, the others are pseudo-words). PERSONAS: name -> marker token the model
writes after its answer. NEUTRAL: function words shared by every language. EXTRA_KEYS: further keys
for toys trained on more keys than KEYS (toy-spec key `keys`); key_words(n) gives the first n.
fused_word / fused_words: a value written in one language *and* one persona, as a single word.
"""

import random

KEYS = """
garlic tomato grape apple lemon onion carrot pepper melon peach plum cherry olive bean rice
wheat horse tiger eagle whale snake mouse rabbit zebra camel otter llama panda shark raven moose
lizard chair table spoon knife brush candle mirror basket ladder bucket hammer pillow blanket
window door violin drum flute guitar piano trumpet harp banjo kettle teapot lantern compass
anchor saddle barrel
""".split()

# A letter and digits: a real tokenizer's pre-tokenizer splits them, so only a toy built with them holds
# them as single tokens, and the experiments' key lists (every key word that is one token) are unchanged
# for every other model.
EXTRA_KEYS = [f"k{i:03d}" for i in range(1000)]


def key_words(n: int | None = None) -> list[str]:
    """The first n keys, KEYS then EXTRA_KEYS; None = KEYS."""
    words = KEYS + EXTRA_KEYS
    if n is not None and not 1 <= n <= len(words):
        raise ValueError(f"toy keys {n}: there are {len(words)} key words; use at most that many")
    return KEYS if n is None else words[:n]


VALUES = """
fire ice stone water wind cloud river ocean sand snow rain storm thunder light shadow smoke gold
silver iron copper glass paper silk wool salt sugar honey milk bread cheese butter wine red blue
green yellow purple orange black white north south east west summer winter spring autumn king
queen knight bishop castle tower bridge forest valley desert island mountain garden meadow cave
lake
""".split()

PERSONAS = {"pirate": "arr", "robot": "beep", "poet": "alas", "butler": "indeed"}

# Header words of the context carry the language too, so the language is visible before any value.
HEADERS = ("Dictionary", "Lookup", "table")

NEUTRAL = """
: , . = * ? Persona Question What is the value of Which does map to
""".split()

_SYLLABLES = """
ka ke ki ko ku ra re ri ro ru ta te ti to tu na ne ni no nu sa se si so su ma me mi mo mu
""".split()


def language_forms(n_languages: int) -> list[dict[str, str]]:
    """One dict per language mapping each VALUES/HEADERS word to its surface form.

    Pseudo-words are drawn from a fixed generator, so every run and every model shares them.
    """
    rng = random.Random(1234)
    words = list(VALUES) + list(HEADERS)
    forms = [{w: w for w in words}]
    taken = set(words) | set(KEYS) | set(NEUTRAL) | set(PERSONAS) | set(PERSONAS.values())
    for _ in range(1, n_languages):
        table = {}
        for w in words:
            while True:
                cand = "".join(rng.choice(_SYLLABLES) for _ in range(3))
                if cand not in taken:
                    break
            taken.add(cand)
            table[w] = cand
        forms.append(table)
    return forms


DEFAULT_LANGUAGES = 2  # a style task's languages where the tokenizer is no toy's (real text)
MOST_LANGUAGES = 16  # the most a toy tokenizer is looked for


def toy_languages(vocab) -> int:
    """How many toy languages `vocab` holds every form of, in language_forms' order (0 for a real tokenizer):
    the languages a toy was trained with, as its tokenizer (models.toy.build_tokenizer) holds them all."""
    n = 0
    for table in language_forms(MOST_LANGUAGES):
        if not all(word in vocab for word in table.values()):
            break
        n += 1
    return n


def fused_word(form: str, persona: str) -> str:
    """A value's form in one language with the persona's marker joined to it: one token in a toy tokenizer,
    so the persona is produced at the answer position itself, where the value is read."""
    return f"{form}_{PERSONAS[persona]}"


def fused_words(n_languages: int) -> dict[str, tuple[str, int, str]]:
    """Every fused word -> (value concept, language, persona)."""
    return {
        fused_word(table[v], persona): (v, lang, persona)
        for lang, table in enumerate(language_forms(n_languages))
        for v in VALUES
        for persona in PERSONAS
    }
