import pytest

from hybridlens.models.toy import build_tokenizer, toy_vocabulary
from hybridlens.tasks.items import entry_parts, token_positions, token_roles
from hybridlens.tasks.retrieval import (
    FORMATS,
    FUSED_FORMATS,
    NOTES,
    TASK_FORMATS,
    clean_corrupt_pairs,
    donor_host_pairs,
    make_prompts,
    notes_table,
)
from hybridlens.tasks.vocab import KEYS, PERSONAS, VALUES, fused_words, language_forms

TOK = build_tokenizer(3)


def _enc(texts):
    return TOK(list(texts), add_special_tokens=False, return_offsets_mapping=True)


@pytest.mark.parametrize("fmt", [*FORMATS, "hop", "notes"])
def test_every_word_is_one_token_and_round_trips(fmt):
    prompts = make_prompts(0, 20, 16, fmt, n_languages=3)
    for p in prompts:
        ids = TOK(p.text + " " + p.target, add_special_tokens=False)["input_ids"]
        assert len(ids) == len((p.text + " " + p.target).split())
        assert TOK.unk_token_id not in ids
        assert TOK.decode(ids) == p.text + " " + p.target


def test_vocabularies_are_disjoint():
    forms = language_forms(3)
    langs = [set(f[v] for v in VALUES) for f in forms]
    assert not set(KEYS) & set(VALUES)
    assert all(not (langs[i] & langs[j]) for i in range(3) for j in range(i + 1, 3))
    assert len(toy_vocabulary(3)) == len(set(toy_vocabulary(3)))


def test_generator_is_deterministic():
    assert make_prompts(7, 10, 8, "rev") == make_prompts(7, 10, 8, "rev")
    assert make_prompts(7, 10, 8, "rev") != make_prompts(8, 10, 8, "rev")


@pytest.mark.parametrize("fmt", [*FORMATS, "hop", "notes"])
def test_answer_is_the_queried_value_in_the_context_language(fmt):
    for p in make_prompts(1, 30, 8, fmt, n_languages=2):
        key, concept = p.pairs[p.query]
        assert p.answer == language_forms(2)[p.language][concept]
        assert p.text[slice(*p.spans["query"])] == key
        assert p.text[slice(*p.spans[f"value{p.query}"])] == p.answer
        assert p.marker == PERSONAS[p.persona]


@pytest.mark.parametrize("fmt", [*FORMATS, "hop", "notes"])
def test_clean_corrupt_differ_in_exactly_two_positions(fmt):
    for clean, corrupt in clean_corrupt_pairs(make_prompts(2, 30, 8, fmt), seed=3):
        a, b = _enc([clean.text])["input_ids"][0], _enc([corrupt.text])["input_ids"][0]
        assert len(a) == len(b)
        assert sum(x != y for x, y in zip(a, b, strict=True)) == 2
        assert corrupt.answer != clean.answer and corrupt.answer in clean.text.split()


@pytest.mark.parametrize("fmt", ["chat", "hop", "notes", "fused_notes"])
def test_donor_host_share_the_dictionary_and_differ_in_the_key(fmt):
    for donor, host in donor_host_pairs(make_prompts(4, 30, 8, fmt), seed=5):
        assert donor.pairs == host.pairs and donor.query != host.query
        a, b = _enc([donor.text])["input_ids"][0], _enc([host.text])["input_ids"][0]
        diff = [i for i, (x, y) in enumerate(zip(a, b, strict=True)) if x != y]
        assert len(diff) == 1 and diff[0] in token_positions(host, _enc([host.text])["offset_mapping"][0], "query")


def test_token_positions_of_parts():
    p = make_prompts(0, 1, 4, "chat")[0]
    off = _enc([p.text])["offset_mapping"][0]
    words = p.text.split()
    assert token_positions(p, off, "final") == [len(words) - 1]
    assert [words[i] for i in token_positions(p, off, "query")] == [p.pairs[p.query][0]]
    dict_words = {words[i] for i in token_positions(p, off, "dict")}
    assert dict_words == {k for k, _ in p.pairs} | {
        w for w in words if w in {language_forms(2)[p.language][v] for _, v in p.pairs}
    }
    assert words[token_positions(p, off, "question")[0]] == "Question"
    with pytest.raises(ValueError, match="unknown prompt part 'nope'"):
        token_positions(p, off, "nope")


@pytest.mark.parametrize("fmt", [*FORMATS, "notes"])
def test_token_roles(fmt):
    """Every dictionary key and value, the question's key and the final token get their role; the rest,
    persona and template words included, are other."""
    p = make_prompts(2, 1, 4, fmt)[0]
    off = _enc([p.text])["offset_mapping"][0]
    words, roles = p.text.split(), token_roles(p, off)
    forms = language_forms(2)[p.language]
    assert len(roles) == len(words) and roles[-1] == "final"
    assert sorted(w for w, r in zip(words, roles, strict=True) if r == "key") == sorted(k for k, _ in p.pairs)
    assert sorted(w for w, r in zip(words, roles, strict=True) if r == "value") == sorted(forms[v] for _, v in p.pairs)
    assert [w for w, r in zip(words, roles, strict=True) if r == "question"] == [p.pairs[p.query][0]]
    assert p.persona in {w for w, r in zip(words, roles, strict=True) if r == "other"}


def test_translate_writes_the_dictionary_in_language_0_and_asks_for_the_context_language():
    """Only the header word carries the language, so the answer's language is produced, not copied."""
    forms = language_forms(3)
    prompts = make_prompts(5, 30, 8, "translate", n_languages=3)
    chats = make_prompts(5, 30, 8, "chat", n_languages=3)  # the same seed draws the same dictionaries and styles
    assert {p.language for p in prompts} == {0, 1, 2}
    for p, chat in zip(prompts, chats, strict=True):
        key, concept = p.pairs[p.query]
        assert p.text.split()[:6] == chat.text.split()[:6]  # persona line and header in the context's language
        assert [p.text[slice(*p.spans[f"value{i}"])] for i in range(8)] == [forms[0][v] for _, v in p.pairs]
        assert p.answer == forms[p.language][concept] and p.text[slice(*p.spans["query"])] == key
        assert (p.answer in p.text.split()) == (p.language == 0)
        ids = TOK(p.text + " " + p.target, add_special_tokens=False)["input_ids"]
        assert TOK.unk_token_id not in ids and len(ids) == len((p.text + " " + p.target).split())
    with pytest.raises(ValueError, match="unknown task format 'gloss'"):
        make_prompts(5, 1, 8, "gloss")


def test_translate_late_puts_both_style_cues_after_an_identical_dictionary():
    """Nothing before the question's cues differs by style, so no dictionary token can carry it."""
    forms = language_forms(3)
    late = make_prompts(5, 30, 8, "translate_late", n_languages=3)
    translate = make_prompts(5, 30, 8, "translate", n_languages=3)
    assert {p.language for p in late} == {0, 1, 2}
    for p, t in zip(late, translate, strict=True):
        words = p.text.split()
        cues = words.index("Persona")
        assert words[:cues] == ["Dictionary", ":", *t.text.split()[6:][: cues - 2]]  # translate's, neutral header
        assert words[cues : cues + 6] == ["Persona", ":", p.persona, ".", forms[p.language]["Lookup"], ":"]
        assert p.text[slice(*p.spans["question"])] == t.text[slice(*t.spans["question"])]
        assert p.spans["persona"][0] > p.spans[f"value{len(p.pairs) - 1}"][1]
        assert (p.answer, p.marker) == (t.answer, t.marker)
        ids = TOK(p.text + " " + p.target, add_special_tokens=False)["input_ids"]
        assert TOK.unk_token_id not in ids and len(ids) == len((p.text + " " + p.target).split())


def test_translate_fused_asks_translate_late_s_question_for_one_word_in_the_context_language_and_persona():
    """The prompt is translate_late's; only the answer differs, and only a toy built for it holds the word."""
    fused = make_prompts(5, 30, 8, "translate_fused", n_languages=3)
    late = make_prompts(5, 30, 8, "translate_late", n_languages=3)
    meaning, tok = fused_words(3), build_tokenizer(3, fused=True)
    assert len(meaning) == len(VALUES) * 3 * len(PERSONAS)
    assert {(p.language, p.persona) for p in fused} >= {(0, "pirate"), (2, "butler")}
    for p, t in zip(fused, late, strict=True):
        assert (p.text, p.spans, p.marker) == (t.text, t.spans, t.marker)
        assert p.answer == f"{t.answer}_{p.marker}"
        assert meaning[p.answer] == (p.pairs[p.query][1], p.language, p.persona)
        ids = tok(p.text + " " + p.target, add_special_tokens=False)["input_ids"]
        assert tok.unk_token_id not in ids and len(ids) == len((p.text + " " + p.target).split())
    assert TOK(fused[0].answer, add_special_tokens=False)["input_ids"] == [TOK.unk_token_id]
    for n_keys in (None, 100):  # the fused words come last: every other word keeps its id
        plain = toy_vocabulary(3, n_keys)
        assert toy_vocabulary(3, n_keys, fused=True) == plain + list(meaning)


def test_the_style_cues_are_the_persona_line_and_the_header_after_it():
    forms = language_forms(2)
    for fmt in TASK_FORMATS:
        for p in make_prompts(3, 6, 4, fmt, n_languages=2):
            f = forms[p.language]
            header = {"rev": [], "list": [f["Lookup"], f["table"], ":"]}.get(fmt, [f["Dictionary"], ":"])
            if fmt in ("translate_late", *FUSED_FORMATS):
                header = [f["Lookup"], ":"]
                assert p.spans["cues"][1] + 1 == p.spans["question"][0]  # the cues end the context
            assert p.text[slice(*p.spans["cues"])].split() == ["Persona", ":", p.persona, ".", *header], fmt


def test_hop_answers_through_a_link_that_only_the_first_table_names():
    """Key -> link in the first table, link -> value in the second, in another order: two lookups."""
    prompts = make_prompts(6, 40, 8, "hop", n_languages=2)
    forms = language_forms(2)
    links_of_garlic = set()
    for p in prompts:
        words = p.text.split()
        word = {name: p.text[slice(*span)] for name, span in p.spans.items()}
        keys = [k for k, _ in p.pairs]
        links = [word[f"link{i}"] for i in range(8)]
        assert [word[f"key{i}"] for i in range(8)] == keys
        assert len(set(links)) == 8 and not set(links) & set(keys) and set(links) <= set(KEYS)
        assert [word[f"linkkey{i}"] for i in range(8)] == links
        assert [word[f"value{i}"] for i in range(8)] == [forms[p.language][v] for _, v in p.pairs]
        assert word[f"value{p.query}"] == p.answer and word["query"] == keys[p.query]
        # the answer is nowhere next to the queried key: only the link joins them
        assert words[words.index(keys[p.query]) + 2] == links[p.query] != p.answer
        assert entry_parts(p, p.query) == [f"{n}{p.query}" for n in ("key", "link", "linkkey", "value")]
        if "garlic" in keys:
            links_of_garlic.add(links[keys.index("garlic")])
    assert sum(sorted(range(8), key=lambda i: p.spans[f"linkkey{i}"][0]) != list(range(8)) for p in prompts) == 40
    assert len(links_of_garlic) > 1  # links are drawn per dictionary, not fixed per key
    p = prompts[0]
    link = p.text[slice(*p.spans["link0"])]
    roles = token_roles(p, _enc([p.text])["offset_mapping"][0])
    assert [r for r, w in zip(roles, p.text.split(), strict=True) if w == link] == ["value", "key"]


def test_notes_puts_a_never_asked_table_of_other_entries_between_the_dictionary_and_the_question():
    """chat's dictionary and question, with NOTES times as many entries between them whose keys and values
    are none of the dictionary's, fixed by the dictionary's keys: prompts over one dictionary share them."""
    forms = language_forms(2)
    for chat, notes in zip(make_prompts(8, 30, 8, "chat"), make_prompts(8, 30, 8, "notes"), strict=True):
        assert (notes.pairs, notes.query, notes.answer) == (chat.pairs, chat.query, chat.answer)
        f = forms[notes.language]
        dictionary, question = chat.text.split(" Question : ")
        head = f" {f['table']} : "
        assert notes.text.startswith(dictionary + head) and notes.text.endswith(" Question : " + question)
        entries = notes.text[len(dictionary + head) : -len(" Question : " + question) - 2].split(" , ")
        table = [tuple(e.split(" = ")) for e in entries]
        assert len(table) == NOTES * 8
        assert not {k for k, _ in table} & {k for k, _ in notes.pairs}
        assert not {v for _, v in table} & {f[v] for _, v in notes.pairs}

    with pytest.raises(ValueError, match="format notes: 21 pairs and their 42 notes need more keys and values"):
        make_prompts(0, 1, 21, "notes")
    assert len(make_prompts(0, 1, 20, "notes")[0].text.split(" = ")) == 61  # 20 entries and 40 notes


def test_fused_notes_is_translate_fused_with_the_notes_in_language_0_before_the_style_cues():
    """The notes push the content out of the states while the style cues stay last, for the states to carry."""
    forms = language_forms(3)
    fused = make_prompts(9, 30, 8, "translate_fused", n_languages=3)
    both = make_prompts(9, 30, 8, "fused_notes", n_languages=3)
    tok = build_tokenizer(3, fused=True)
    assert {p.language for p in both} == {0, 1, 2}
    for f, p in zip(fused, both, strict=True):
        assert (p.pairs, p.query, p.answer, p.marker) == (f.pairs, f.query, f.answer, f.marker)
        table = " , ".join(f"{k} = {forms[0][v]}" for k, v in notes_table(p.pairs))
        dictionary, cues = f.text.split(" Persona : ")
        assert p.text == f"{dictionary} {forms[0]['table']} : {table} . Persona : {cues}"
        assert p.text[slice(*p.spans["query"])] == p.pairs[p.query][0]
        ids = tok(p.text + " " + p.target, add_special_tokens=False)["input_ids"]
        assert tok.unk_token_id not in ids and len(ids) == len((p.text + " " + p.target).split())
