"""Split-prefill: the style task's items, how generations are read, the runs under every condition and the
statistics; on the tiny saved toy models of every family and on a model with Qwen's real BPE tokenizer."""

from pathlib import Path

import numpy as np
import pytest

from hybridlens import tasks
from hybridlens.experiments.split_prefill import (
    BASELINE,
    CONDITIONS,
    CONTENT_SOURCES,
    attribution,
    retention,
    run_items,
    samples,
    score,
)
from hybridlens.interventions.cache import greedy
from hybridlens.models.adapter import HybridModel
from hybridlens.models.real_tokenizer import qwen_tokenizer
from hybridlens.models.toy import build_toy_model
from hybridlens.tasks.items import turns
from hybridlens.tasks.style import TextLexicon, ToyLexicon, text
from hybridlens.tasks.vocab import PERSONAS, language_forms

REAL_CONFIGS = Path(__file__).parents[2] / "config" / "real-configs"


def style(hm, lexicon="auto", **spec):
    spec = tasks.settings("split_prefill", {"kind": "style", "lexicon": lexicon} | spec, where="test")
    return tasks.items_of(hm, spec)[0], tasks.module("style").lexicon(hm, spec)


@pytest.fixture(scope="module")
def real():
    """A tiny qwen3_5 model that reads Qwen's real tokenizer through its chat template."""
    tok = qwen_tokenizer((REAL_CONFIGS / "Qwen3.5.chat_template.jinja").read_text())
    model = build_toy_model("qwen3_5", len(tok), 32, "LLALLA", heads=2, seed=0).eval()
    return HybridModel(model, tok)


def test_toy_items_pair_contexts_that_differ_in_content_and_style(hm):
    items, lexicon = style(hm, n=20, n_pairs=4, seed=3)
    assert lexicon.kind == "toy" and items == style(hm, n=20, n_pairs=4, seed=3)[0]  # seeded
    for a in items:
        b, bare = a.partners["swap"], a.partners["bare"]
        assert not set(a.concepts) & set(b.concepts) and a.concept in a.concepts and b.concept in b.concepts
        assert a.language != b.language and a.persona != b.persona and a.persona in PERSONAS
        assert bare.persona == "" and "Persona" not in bare.text and bare.concepts == a.concepts
        # The question is the same text in both: only the context differs.
        assert a.text[a.spans["question"][0] :] == b.text[b.spans["question"][0] :]


def test_real_text_items_span_five_languages_and_four_personas_on_a_real_bpe(real):
    items, lexicon = style(real, n=40, n_pairs=4, seed=1)
    assert lexicon.kind == "text"
    assert len({a.language for a in items}) >= 5 and len({a.persona for a in items}) >= 4
    lengths = {len(ids) for ids in real.tokenize([turns(a) for a in items])[0]}
    swap_lengths = [len(ids) for ids in real.tokenize([turns(a.partners["swap"]) for a in items])[0]]
    assert len(lengths) > 1 and swap_lengths != [len(x) for x in real.tokenize([turns(a) for a in items])[0]]
    for a in items:
        rendered, _ = real.render(turns(a))
        assert rendered.startswith("<|im_start|>system\n" + a.system) and a.system.startswith("You are")
        assert text()["languages"][a.language]["instruction"] in a.text
        joined, b = turns(a).joined, a.partners["swap"]  # spans index the joined turns
        question = joined[slice(*a.spans["question"])]
        assert question == turns(b).joined[slice(*b.spans["question"])]
        assert question == text()["question"].format(key=joined[slice(*a.spans["query"])])
        assert joined[slice(*a.spans["persona"])] == a.system and joined[slice(*a.spans["cues"])].endswith(".")
        assert joined[slice(*a.spans["value0"])] == text()["concepts"][a.concepts[0]][a.language][0]
        assert "system" not in real.render(turns(a.partners["bare"]))[0]


SENTENCES = {
    "en": "The dog is sleeping in the garden while the children play outside.",
    "fr": "Le chien dort dans le jardin pendant que les enfants jouent dehors.",
    "de": "Der Hund schläft im Garten, während die Kinder draußen spielen.",
    "es": "El perro duerme en el jardín mientras los niños juegan afuera.",
    "ru": "Собака спит в саду, пока дети играют на улице.",
}


@pytest.mark.parametrize("language", sorted(SENTENCES))
def test_the_language_of_fixed_sentences_is_identified_with_its_confidence(language):
    label, confidence = TextLexicon().language(SENTENCES[language])
    assert label == language and 0.5 < confidence <= 1.0


def test_a_mixed_sentence_reads_as_its_main_language_with_less_confidence():
    lexicon = TextLexicon()
    mixed = "Le chien dort dans le jardin pendant que les enfants jouent, the dog sleeps."
    label, confidence = lexicon.language(mixed)
    assert label == "fr" and confidence < lexicon.language(SENTENCES["fr"])[1]
    assert lexicon.language("42 !") == ("", 0.0)


def test_persona_markers_and_inflected_values_are_read_from_fixed_sentences():
    lexicon = TextLexicon()
    pirate = "Arr, matey! The treasure in locker 12 be a dog, aye."
    assert lexicon.persona_counts(pirate) == {"pirate": 4, "cowboy": 0, "robot": 0, "knight": 0}
    assert lexicon.persona_counts("Howdy partner, y'all reckon it's a horse.")["cowboy"] == 4
    assert lexicon.persona_counts("Verily, thou hast found the owl, sire.")["knight"] == 3
    assert lexicon.persona_counts("It is a dog.") == {"pirate": 0, "cowboy": 0, "robot": 0, "knight": 0}
    assert lexicon.concepts("Ich sehe zwei Hunde und eine KATZE.") == [("dog", "de")]
    assert lexicon.concepts("Я вижу собаку и слона.") == [("dog", "ru"), ("elephant", "ru")]
    assert lexicon.concepts("Hay un ratón, un raton y dos pájaros.") == [("mouse", "es")] * 2 + [("bird", "es")]


def test_every_word_form_names_one_concept_in_one_language():
    seen = {}
    for concept, by_language in text()["concepts"].items():
        for language, (_, *forms) in by_language.items():
            for form in forms:
                assert seen.setdefault(form.casefold(), (concept, language)) == (concept, language), form
    assert set(text()["languages"]) == {lang for by in text()["concepts"].values() for lang in by}


def test_scores_attribute_content_and_style_to_their_context(real):
    items, lexicon = style(real, n=10, n_pairs=4, seed=2)
    a = next(a for a in items if a.language != "en" and a.partners["swap"].language != "en")
    b, forms = a.partners["swap"], text()["concepts"]
    as_b = f"{forms[b.concept][b.language][1]} — " + SENTENCES[b.language]
    row = score(lexicon, a, as_b + " " + " ".join(text()["personas"][b.persona]["markers"][:3]))
    assert (row["retrieval"], row["language"], row["content_source"], row["language_source"]) == (0, 0, "B", "B")
    assert row["persona_source"] == "B" and row["persona"] == 0
    # A's value in B's language: content from A (another language's word), language from B.
    row = score(lexicon, a, f"{forms[a.concept][b.language][1]} — " + SENTENCES[b.language])
    assert (row["retrieval"], row["content_source"], row["language_source"]) == (1, "A_related", "B")
    other = next(c for c in a.concepts if c != a.concept)
    row = score(lexicon, a, f"{forms[other][a.language][1]} " + SENTENCES[a.language])
    assert (row["retrieval"], row["language"], row["content_source"], row["in_context"]) == (0, 1, "A_dict", 1)
    neither = next(c for c in forms if c not in a.concepts + b.concepts)
    assert score(lexicon, a, forms[neither]["en"][1])["content_source"] == "other"
    marker = text()["personas"][a.persona]["markers"][0]
    row = score(lexicon, a, f"{marker} {forms[a.concept][a.language][1]} {marker} x")
    assert row["persona"] == 0.5 and row["content_source"] == "A" and score(lexicon, a, "")["content_source"] == "none"


def test_the_toy_lexicon_reads_pseudo_languages_markers_and_fused_words():
    lexicon, forms = ToyLexicon(2), language_forms(2)
    word = forms[1]["apple"] if "apple" in forms[1] else next(iter(forms[1].values()))
    concept = next(c for c, f in forms[1].items() if f == word)
    assert lexicon.language(f"{word} arr") == ("1", 1.0)
    assert lexicon.persona_counts(f"{word} arr beep arr")["pirate"] == 2
    assert lexicon.concepts(f"{word}_beep") == [(concept, "1")] and lexicon.persona_counts(f"{word}_beep")["robot"] == 1


def test_every_condition_runs_on_contexts_of_different_lengths_with_a_real_tokenizer(real):
    items, lexicon = style(real, n=6, n_pairs=3, seed=4)
    rows = run_items(real, items, 4, lexicon, seed=4, batch_size=4)
    assert [(r["item"], r["condition"]) for r in rows] == [(i, c) for i in range(6) for c in [*CONDITIONS, BASELINE]]
    assert set(r["content_source"] for r in rows) <= set(CONTENT_SOURCES)
    # One item at a time gives the same generations: batching by length groups, not pads.
    single = run_items(real, items, 4, lexicon, seed=4, batch_size=1)
    assert [r["generated"] for r in single] == [r["generated"] for r in rows]


def test_full_condition_rows_match_generation_from_the_whole_prompt(hm):
    items, lexicon = style(hm, n=6, n_pairs=4, seed=2)
    rows = [r for r in run_items(hm, items, 3, lexicon, seed=2, batch_size=4) if r["condition"] == "full"]
    ids, _ = hm.encode([turns(a) for a in items])
    tokens, _ = greedy(hm, ids, 3)
    assert [r["generated"] for r in rows] == [hm.tokenizer.decode(t).strip() for t in tokens.tolist()]
    bare = [r for r in run_items(hm, items, 3, lexicon, seed=2) if r["condition"] == BASELINE]
    ids, _ = hm.encode([turns(a.partners["bare"]) for a in items])
    assert [r["generated"] for r in bare] == [hm.tokenizer.decode(t).strip() for t in greedy(hm, ids, 3)[0].tolist()]


def test_retention_is_the_ratio_of_means_with_paired_intervals():
    rows = []
    for seed in (1, 2):
        for i in range(50):
            base = {"seed": seed, "item": i, "language": 1}
            rows.append({**base, "condition": "full", "retrieval": int(i < 40), "persona": 0.4})
            rows.append({**base, "condition": "kv_only", "retrieval": int(i < 10), "persona": 0.2 * (i % 2)})
            rows.append({**base, "condition": BASELINE, "retrieval": int(i < 40), "persona": 0.05})
    table = {(r["condition"], r["property"]): r for r in retention(rows, ("full", "kv_only"), n_boot=500)}
    assert table[("full", "retrieval")]["retention"] == 1.0
    r = table[("kv_only", "retrieval")]
    assert r["metric"] == pytest.approx(0.2) and r["retention"] == pytest.approx(0.25)
    assert r["retention_lo"] < 0.25 < r["retention_hi"] and r["per_seed"] == "0.200,0.200"
    persona = table[("kv_only", "persona")]
    assert persona["retention"] == pytest.approx(0.25) and persona["over_baseline"] == pytest.approx(2.0)
    assert table[("full", "persona")]["over_baseline"] == pytest.approx(8.0)
    assert persona["baseline"] == pytest.approx(0.05)


def test_attribution_fractions_sum_to_one_per_style_and_samples_show_every_condition(hm):
    items, lexicon = style(hm, n=8, n_pairs=4, seed=4)
    rows = run_items(hm, items, 3, lexicon, seed=4)
    table = attribution(rows)
    for style_ in ("language", "persona"):
        assert sum(r["fraction"] for r in table if r["style"] == style_) == pytest.approx(1.0)
    assert np.isin([r["content_source"] for r in rows], CONTENT_SOURCES).all()
    shown = samples(rows, 2)
    assert [(r["item"], r["condition"]) for r in shown] == [(i, c) for i in range(2) for c in [*CONDITIONS, BASELINE]]


@pytest.mark.parametrize(
    ("spec", "message"),
    [
        ({"languages": ["fr", "xx"]}, r"config split_prefill.languages: 'xx' is not shipped"),
        ({"languages": ["fr"]}, r"config split_prefill.languages: the state-swap needs two"),
        ({"personas": ["pirate", "ninja"]}, r"config split_prefill.personas: 'ninja' is not shipped"),
        ({"n_pairs": 9}, r"config split_prefill.n_pairs: 9; give 2..8"),
        ({"lexicon": "words"}, r"config split_prefill.lexicon: 'words'"),
        ({"seeds": [1]}, r"config split_prefill: key 'seeds' is not one of a style task's keys"),
    ],
)
def test_bad_style_settings_are_refused_in_one_line_before_any_model(spec, message):
    with pytest.raises(ValueError, match=message):
        tasks.settings("split_prefill", {"kind": "style"} | spec, where="config split_prefill")


def test_the_style_task_is_configured_in_its_experiments_section_not_under_tasks():
    with pytest.raises(ValueError, match=r"config tasks.mine: a style task is set in the config's split_prefill"):
        tasks.settings("mine", {"kind": "style"})


EXAMPLE = Path(__file__).parents[2] / "config" / "tasks" / "split_example.jsonl"


def test_a_users_items_run_under_every_condition_and_are_read_by_their_own_answers(real):
    from hybridlens.tasks.jsonl import load
    from hybridlens.tasks.style import check_items, from_items

    loaded = load(EXAMPLE)
    check_items(loaded, {}, "split_prefill.task")
    items = from_items(loaded)
    for a in items:
        bare = a.partners["bare"]
        assert bare.system == "" and bare.persona == "" and a.persona and a.language
        question = turns(a).joined[slice(*a.spans["question"])]
        assert turns(bare).joined[slice(*bare.spans["question"])] == question
        assert turns(a).joined[slice(*a.spans["cues"])] == a.system  # the system turn is the cue
    rows = run_items(real, items, 4, TextLexicon(), seed=1, batch_size=2)
    assert [(r["item"], r["condition"]) for r in rows] == [(i, c) for i in range(3) for c in [*CONDITIONS, BASELINE]]
    a, lexicon = items[0], TextLexicon()
    row = score(lexicon, a, "Arr matey, Marie a planté des tulipes.")
    assert (row["retrieval"], row["language"], row["content_source"], row["persona_source"]) == (1, 1, "A", "A")
    row = score(lexicon, a, "Beep. Marie hat Sonnenblumen gepflanzt.")
    assert (row["retrieval"], row["content_source"], row["language_source"], row["persona_source"]) == (
        0,
        "B",
        "B",
        "B",
    )
    assert score(lexicon, a, "Paul a planté des roses.")["content_source"] == "A_dict"


@pytest.mark.parametrize(
    ("change", "message"),
    [
        (lambda r: r.pop("swap"), r"garden: field 'swap' is missing"),
        (lambda r: r["swap"]["messages"][1].update(content="no question"), r"garden \(swap\): no \[\[question"),
        (lambda r: r.update(persona="ninja"), r"garden: persona 'ninja' has no markers"),
        (lambda r: r["messages"].pop(0), r"garden: no system turn and no \[\[cues"),
    ],
)
def test_a_users_item_split_prefill_cannot_read_is_refused_naming_it(tmp_path, change, message):
    import json

    from hybridlens.tasks.jsonl import load
    from hybridlens.tasks.style import check_items

    record = json.loads(EXAMPLE.read_text(encoding="utf-8").splitlines()[0])
    change(record)
    path = tmp_path / "mine.jsonl"
    path.write_text(json.dumps(record) + "\n", encoding="utf-8")
    with pytest.raises(ValueError, match=message):
        check_items(load(path), {}, "split_prefill.task")
