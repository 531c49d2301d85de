"""The style task of split-prefill: a context that sets content (facts to retrieve) and style (the language
it is written and answered in, a persona), and the question after it.

On a real tokenizer the items are real text (data/style.yaml): a persona given as the system prompt, then in
the user turn an instruction in the context's language, one sentence per fact (which animal is in which
numbered locker), and the same English question for every language, rendered through the model's chat
template. On a toy tokenizer they are the toy zoo's rendering (tasks.retrieval), whose languages are
pseudo-words and whose personas are one-token markers. A Lexicon reads generated text for both the same way:
the concepts it names, its language and its persona markers.

Every item (context A) carries two partners: `swap`, a context B with the same keys and question but other
values, another language and another persona; `bare`, A without a persona (the no-persona baseline).

DEFAULTS, check, items   the task's plug-in interface (tasks/__init__.py)
StyleItem                an item with its style and content: language, persona, asked concept, all concepts
from_items               a user's items (a JSONL task with swap partners) as split-prefill items
check_items              refuse, in one line, a user's item that split-prefill cannot read
lexicon                  the Lexicon that reads a model's generations for this task
TextLexicon              real text: a language identifier, the concepts' word forms, the marker lexicons
ToyLexicon               the toy zoo: pseudo-language forms, one-token markers, fused words
"""

import functools
import random
import re
from dataclasses import dataclass, fields, replace
from pathlib import Path

import yaml

from hybridlens.tasks.items import Item, choice_words

DATA = Path(__file__).parent / "data" / "style.yaml"
LEXICONS = ("auto", "text", "toy")


@functools.cache
def text() -> dict:
    """The shipped multilingual text: languages, question, concepts, personas."""
    return yaml.safe_load(DATA.read_text(encoding="utf-8"))


SECTION = "split_prefill"  # its keys are that section's, not an entry of tasks:
DEFAULTS = {
    "n": 100,
    "n_pairs": 8,
    "seed": 1,
    "lexicon": "auto",  # text: the shipped real text; toy: the toy zoo's; auto: toy where the tokenizer holds it
    "languages": [],  # text: language codes of data/style.yaml; [] = all
    "personas": [],  # persona names; [] = all
    "format": "chat",  # toy: the toy rendering's format
    "persona_markers": {},  # persona -> marker words, replacing the shipped lexicon's
}


@dataclass(frozen=True)
class StyleItem(Item):
    """An item with its content: language is a code (text) or a toy language's index; persona "" is none."""

    concept: str = ""  # the asked fact's value
    concepts: tuple[str, ...] = ()  # every fact's value, in context order


def check(spec: dict, where: str) -> None:
    from hybridlens.tasks.retrieval import TOY_FORMATS
    from hybridlens.tasks.vocab import PERSONAS

    data = text()
    if spec["lexicon"] not in LEXICONS:
        raise ValueError(f"{where}.lexicon: {spec['lexicon']!r}; use one of {LEXICONS}")
    for key, known in (("languages", list(data["languages"])), ("personas", [*data["personas"], *PERSONAS])):
        unknown = [x for x in spec[key] if x not in known]
        if unknown:
            raise ValueError(f"{where}.{key}: {unknown[0]!r} is not shipped; use some of {known}")
        if len(spec[key]) == 1:
            raise ValueError(f"{where}.{key}: the state-swap needs two; name at least two or [] for all")
    if not isinstance(spec["n_pairs"], int) or not 2 <= spec["n_pairs"] <= len(data["concepts"]) // 2:
        raise ValueError(f"{where}.n_pairs: {spec['n_pairs']!r}; give 2..{len(data['concepts']) // 2}")
    if spec["format"] not in TOY_FORMATS:
        raise ValueError(f"{where}.format: {spec['format']!r}; the toy rendering has {TOY_FORMATS}")


def _chosen(spec, key):
    return list(spec.get(key) or text()[key])


def lexicon_kind(hm, spec: dict) -> str:
    """toy where the tokenizer keeps two toy languages' words whole (the toy zoo's), else text."""
    if spec.get("lexicon", "auto") != "auto":
        return spec["lexicon"]
    from hybridlens.tasks.prompt_sets import vocabulary

    try:
        languages = vocabulary(hm, spec["n_pairs"])[2]
    except ValueError:
        return "text"
    return "toy" if len(languages) >= 2 else "text"


def items(hm, spec: dict):
    """(items, counts): spec["n"] items seeded by spec["seed"], each with its swap and bare partners."""
    spec = DEFAULTS | spec
    if lexicon_kind(hm, spec) == "toy":
        return _toy_items(hm, spec)
    languages, personas = _chosen(spec, "languages"), _chosen(spec, "personas")
    out = text_items(spec["seed"], spec["n"], spec["n_pairs"], languages, personas)
    return out, {"languages": len(languages), "personas": len(personas), "values": len(text()["concepts"])}


def text_items(seed: int, n: int, n_pairs: int, languages, personas) -> list[StyleItem]:
    """Real-text items: keys are distinct two-digit locker numbers; B has A's keys and question, values none
    of A's, and a language and persona other than A's."""
    rng, concepts = random.Random(seed), sorted(text()["concepts"])
    out = []
    for i in range(n):
        keys = rng.sample(range(10, 100), n_pairs)
        values = rng.sample(concepts, 2 * n_pairs)
        query = rng.randrange(n_pairs)
        language, persona = rng.choice(languages), rng.choice(personas)
        other = (rng.choice([x for x in languages if x != language]), rng.choice([p for p in personas if p != persona]))
        a = render(list(zip(keys, values[:n_pairs], strict=True)), query, language, persona, f"item {i}")
        b = render(list(zip(keys, values[n_pairs:], strict=True)), query, *other, f"item {i} swap")
        bare = render(list(zip(keys, values[:n_pairs], strict=True)), query, language, "", f"item {i} bare")
        out.append(replace(a, partners={"swap": b, "bare": bare}))
    return out


def render(pairs, query: int, language: str, persona: str, name: str = "") -> StyleItem:
    """One real-text item: `pairs` are (locker number, concept); the persona ("" = none) is the system turn.
    Spans index the joined turns (system, newline, user): persona, instruction, cues (both), key{i},
    value{i}, question, query."""
    data = text()
    lang = data["languages"][language]
    system = data["personas"][persona]["system"] if persona else ""
    at = len(system) + 1 if system else 0
    spans = {"persona": (0, len(system))} if system else {}
    user = lang["instruction"]
    spans["instruction"] = (at, at + len(user))
    spans["cues"] = (0, at + len(user))
    for i, (key, concept) in enumerate(pairs):
        phrase = data["concepts"][concept][language][0]
        head, tail = lang["fact"].split("{key}")
        before, after = tail.split("{value}")
        user += "\n" + head
        spans[f"key{i}"] = (at + len(user), at + len(user) + len(str(key)))
        user += f"{key}{before}"
        spans[f"value{i}"] = (at + len(user), at + len(user) + len(phrase))
        user += phrase + after
    key = str(pairs[query][0])
    question = data["question"].format(key=key)
    spans["question"] = (at + len(user) + 1, at + len(user) + 1 + len(question))
    spans["query"] = (spans["question"][0] + question.index(key), spans["question"][0] + question.index(key) + len(key))
    user += "\n" + question
    concept = pairs[query][1]
    return StyleItem(
        text=user,
        answer=data["concepts"][concept][language][1],
        spans=spans,
        system=system,
        lead="",
        name=name,
        language=language,
        persona=persona,
        concept=concept,
        concepts=tuple(v for _, v in pairs),
    )


def _toy_items(hm, spec):
    """The toy zoo's items: its words, formats, pseudo-languages and personas (tasks.retrieval)."""
    from hybridlens.tasks.prompt_sets import vocabulary
    from hybridlens.tasks.retrieval import make_prompt, make_prompts
    from hybridlens.tasks.vocab import PERSONAS

    n_pairs, fmt = spec["n_pairs"], spec["format"]
    n_languages = hm.n_languages
    keys, values, languages, counts = vocabulary(hm, n_pairs)
    if len(languages) < 2 or len(values) < 2 * n_pairs:
        raise ValueError(
            f"tokenizer of {hm.source}: the state-swap needs two toy languages and {2 * n_pairs} single-token "
            f"values; it has {len(languages)} and {len(values)}; use fewer pairs or lexicon: text"
        )
    personas = [p for p in spec["personas"] if p in PERSONAS] or list(PERSONAS)  # the toys have their own
    rng, out = random.Random(spec["seed"] + 7919), []
    prompts = make_prompts(spec["seed"], spec["n"], n_pairs, fmt, n_languages, languages, personas, keys, values)
    for i, a in enumerate(prompts):
        used = {v for _, v in a.pairs}
        b_values = rng.sample([v for v in values if v not in used], n_pairs)
        b_pairs = [(k, v) for (k, _), v in zip(a.pairs, b_values, strict=True)]
        language = rng.choice([g for g in languages if g != a.language])
        persona = rng.choice([p for p in personas if p != a.persona])
        b = make_prompt(b_pairs, a.query, fmt, language, persona, n_languages)
        bare = make_prompt(list(a.pairs), a.query, fmt, a.language, None, n_languages)
        partners = {"swap": _from_prompt(b, f"item {i} swap"), "bare": _from_prompt(bare, f"item {i} bare")}
        out.append(replace(_from_prompt(a, f"item {i}"), partners=partners))
    return out, counts


def _from_prompt(p, name) -> StyleItem:
    return StyleItem(
        text=p.text,
        answer=p.answer,
        spans=p.spans,
        system=p.system,
        prefill=p.prefill,
        lead=p.lead,
        choices=p.choices,
        name=name,
        language=str(p.language),
        persona=p.persona or "",
        concept=p.pairs[p.query][1],
        concepts=tuple(v for _, v in p.pairs),
    )


def from_items(items) -> list[StyleItem]:
    """A user's items as split-prefill items: the asked value is the answer, the facts' values the choices;
    the swap partner is the item's own, the bare partner the item without its system turn."""
    out = []
    for it in items:
        a, b = _as_style(it), _as_style(it.partners["swap"])
        out.append(replace(a, partners={"swap": b, "bare": _bare(a)}))
    return out


def _as_style(it) -> StyleItem:
    own = {f.name: getattr(it, f.name) for f in fields(Item)} | {"partners": {}}
    if "cues" not in it.spans and it.system:  # the style cues the cue condition replaces: the system turn
        own["spans"] = {**it.spans, "cues": (0, len(it.system))}
    return StyleItem(**own, concept=it.answer, concepts=choice_words(it))


def _bare(item: StyleItem) -> StyleItem:
    """The item without its system turn (its persona); spans move with the user turn they index."""
    if not item.system:
        return replace(item, persona="")
    cut = len(item.system) + 1
    spans = {n: (a - cut, b - cut) for n, (a, b) in item.spans.items() if a >= cut}
    return replace(item, system="", persona="", spans=spans)


def check_items(items, spec: dict, where: str) -> None:
    """Every item has a question span (the split point) and a swap partner with one, style cues (a system turn
    or a cues span), and names personas the lexicon knows (the shipped ones or persona_markers)."""
    known = set(spec.get("persona_markers") or text()["personas"])
    for it in items:
        for label, item in (("", it), (" (swap)", it.partners.get("swap"))):
            if item is None:
                raise ValueError(f"{it.name}: field 'swap' is missing; {where} pairs every item with one")
            if "question" not in item.spans:
                raise ValueError(
                    f"{it.name}{label}: no [[question:...]] span; {where} splits the prompt where the question starts"
                )
            if label == "" and not item.system and "cues" not in item.spans:
                raise ValueError(
                    f"{it.name}: no system turn and no [[cues:...]] span; {where} needs the style cues it replaces"
                )
            if item.persona and item.persona not in known:
                raise ValueError(
                    f"{it.name}{label}: persona {item.persona!r} has no markers; use one of {sorted(known)} "
                    "or give its markers in split_prefill.persona_markers"
                )


def lexicon(hm, spec: dict):
    spec = DEFAULTS | spec
    if lexicon_kind(hm, spec) == "toy":
        return ToyLexicon(hm.n_languages, spec["persona_markers"])
    return TextLexicon(_chosen(spec, "languages"), spec["persona_markers"])


class Lexicon:
    """Reads a generation: words, the concepts it names (in order, with the language of each word form), its
    language with the identifier's confidence, and its persona markers."""

    kind = ""
    n_new = 0  # greedy tokens long enough to read these properties
    forms: dict[str, tuple[str, str]]  # case-folded word form -> (concept, language)
    markers: dict[str, frozenset[str]]  # persona -> case-folded marker words

    def words(self, generated: str) -> list[str]:
        raise NotImplementedError

    def language(self, generated: str) -> tuple[str, float]:
        raise NotImplementedError

    def concepts(self, generated: str, extra=None) -> list[tuple[str, str]]:
        """The values a generation names, in order, as (concept, language); `extra` adds phrases a lexicon
        does not know (a user's answers)."""
        return [self.forms[w] for w in self.words(generated) if w in self.forms]

    def persona_counts(self, generated: str) -> dict[str, int]:
        words = self.words(generated)
        return {p: sum(w in m for w in words) for p, m in self.markers.items()}


class TextLexicon(Lexicon):
    """Real text. The language is py3langid's (langid.py's model, shipped in its wheel, so it runs offline)
    over all of its 97 languages, not only the task's, so a reply in a language no context has reads as
    such; a reply without letters has none ("", 0)."""

    kind, n_new = "text", 48
    WORD = re.compile(r"\w+(?:'\w+)?")

    def __init__(self, languages=(), persona_markers=None):
        data = text()
        self.forms = {
            form.casefold(): (concept, lang)
            for concept, by_language in data["concepts"].items()
            for lang, (_, *forms) in by_language.items()
            for form in forms
        }
        markers = persona_markers or {p: d["markers"] for p, d in data["personas"].items()}
        self.markers = {p: frozenset(w.casefold() for w in ws) for p, ws in markers.items()}

    def words(self, generated: str) -> list[str]:
        return [w.casefold() for w in self.WORD.findall(generated)]

    def concepts(self, generated: str, extra=None) -> list[tuple[str, str]]:
        """Shipped word forms, and `extra` phrases (a user's answers: phrase -> (concept, language)) as whole
        words, in the order they stand."""
        folded = generated.casefold()
        found = [(m.start(), self.forms[m.group()]) for m in self.WORD.finditer(folded) if m.group() in self.forms]
        for phrase, meaning in (extra or {}).items():
            pattern = rf"(?<!\w){re.escape(phrase.casefold())}(?!\w)"
            found += [(m.start(), meaning) for m in re.finditer(pattern, folded)]
        return [meaning for _, meaning in sorted(found, key=lambda f: f[0])]

    def language(self, generated: str) -> tuple[str, float]:
        if not any(c.isalpha() for c in generated):
            return "", 0.0
        label, confidence = _identifier().classify(generated)
        return label, float(confidence)


@functools.cache
def _identifier():
    from py3langid.langid import MODEL_FILE, LanguageIdentifier

    return LanguageIdentifier.from_model_file(MODEL_FILE, norm_probs=True)


class ToyLexicon(Lexicon):
    """The toy zoo: a value's form names its concept and its (pseudo-)language, header words their language;
    the language of a generation is the one most of its known words are written in (confidence: their share);
    a persona's marker is one token, and a fused word carries a value, a language and a persona at once."""

    kind, n_new = "toy", 3

    def __init__(self, n_languages: int, persona_markers=None):
        from hybridlens.tasks.vocab import HEADERS, PERSONAS, VALUES, fused_words, language_forms

        self.forms, self.spoken, self.fused = {}, {}, {}
        for lang, table in enumerate(language_forms(n_languages)):
            for word, form in table.items():
                if word in VALUES:
                    self.forms[form] = (word, str(lang))
                if word in HEADERS or word in VALUES:
                    self.spoken.setdefault(form, str(lang))
        for word, (concept, lang, persona) in fused_words(n_languages).items():
            self.forms[word], self.spoken[word], self.fused[word] = (concept, str(lang)), str(lang), persona
        markers = persona_markers or {p: [m] for p, m in PERSONAS.items()}
        self.markers = {p: frozenset(ws) for p, ws in markers.items()}

    def words(self, generated: str) -> list[str]:
        return generated.split()

    def language(self, generated: str) -> tuple[str, float]:
        spoken = [self.spoken[w] for w in self.words(generated) if w in self.spoken]
        if not spoken:
            return "", 0.0
        best = max(sorted(set(spoken)), key=spoken.count)
        return best, spoken.count(best) / len(spoken)

    def persona_counts(self, generated: str) -> dict[str, int]:
        counts = super().persona_counts(generated)
        for w in self.words(generated):
            if w in self.fused:
                counts[self.fused[w]] = counts.get(self.fused[w], 0) + 1
        return counts
