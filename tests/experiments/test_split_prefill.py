"""Split-prefill items, scoring and statistics, on the tiny saved models of every family."""

import numpy as np
import pytest
import torch

from hybridlens.experiments.split_prefill import (
    CONDITIONS,
    Decoder,
    _row,
    attribution,
    make_items,
    retention,
    run_items,
)
from hybridlens.interventions.cache import greedy
from hybridlens.models.adapter import HybridModel
from hybridlens.models.toy import build_tokenizer, build_toy_model
from hybridlens.tasks.retrieval import FUSED_FORMATS
from hybridlens.tasks.vocab import PERSONAS, VALUES, fused_word, language_forms

MARKERS = {p: [m] for p, m in PERSONAS.items()}


def test_items_pair_contexts_that_differ_in_content_and_style(hm):
    items = make_items(hm, 3, 20, 4, "chat", 2)
    assert items == make_items(hm, 3, 20, 4, "chat", 2)  # seeded
    for it in items:
        a, b = it.a, it.b
        assert [k for k, _ in a.pairs] == [k for k, _ in b.pairs] and a.query == b.query
        assert not {v for _, v in a.pairs} & {v for _, v in b.pairs}
        assert a.language != b.language and a.persona != b.persona
        ids_a, _ = hm.encode([a.text])
        ids_b, _ = hm.encode([b.text])
        assert ids_a.shape == ids_b.shape
        # The question is the same tokens in both: only the context differs.
        q = len(hm.encode([a.text[a.spans["question"][0] :]])[0][0])
        assert torch.equal(ids_a[0, -q:], ids_b[0, -q:])


def test_rows_attribute_content_and_style_to_their_context(hm):
    it = make_items(hm, 1, 1, 4, "chat", 2)[0]
    decode = Decoder(hm, 2, MARKERS)
    a, b = it.a, it.b
    as_b = [hm.token_id(b.answer), hm.token_id(b.marker), hm.token_id(a.marker)]
    row = _row(hm, decode, it, "state_swap", as_b)
    assert (row["retrieval"], row["language"], row["persona"]) == (0, 0, 0)
    assert (row["content_source"], row["language_source"], row["persona_source"]) == ("B", "B", "B")
    # A's value written in B's language: content from A, language from B; the first marker decides.
    other_entry = next(i for i in range(len(a.pairs)) if i != a.query)
    a_in_b = language_forms(2)[b.language][a.pairs[a.query][1]]
    row = _row(hm, decode, it, "state_swap", [hm.token_id(a_in_b), hm.token_id(a.marker), hm.token_id(b.marker)])
    # Retrieval scores the content alone, so the right value in the wrong language still counts.
    assert (row["retrieval"], row["language"], row["persona"]) == (1, 0, 1)
    assert (row["content_source"], row["language_source"], row["persona_source"]) == ("A", "B", "A")
    wrong = language_forms(2)[a.language][a.pairs[other_entry][1]]
    row = _row(hm, decode, it, "state_only", [hm.token_id(wrong), hm.token_id("the"), hm.token_id("is")])
    assert row["content_source"] == "A_dict" and row["in_context"] == 1 and row["persona_source"] == "other"


@pytest.mark.parametrize("fmt", FUSED_FORMATS)
def test_a_fused_answer_word_carries_its_own_persona(fmt):
    """A fused format: the persona is the answer word's, whatever marker follows it."""
    tok = build_tokenizer(2, fused=True)
    hm = HybridModel(build_toy_model("granitemoehybrid", len(tok), 24, "LA", heads=2).eval(), tok)
    it = make_items(hm, 1, 1, 4, fmt, 2)[0]
    a, b = it.a, it.b
    decode, forms = Decoder(hm, 2, MARKERS), language_forms(2)
    a_in_b_style = fused_word(forms[b.language][a.pairs[a.query][1]], b.persona)
    row = _row(hm, decode, it, "state_swap", [hm.token_id(a_in_b_style), hm.token_id(a.marker), hm.token_id(a.marker)])
    assert (row["retrieval"], row["language"], row["persona"]) == (1, 0, 0)
    assert (row["content_source"], row["language_source"], row["persona_source"]) == ("A", "B", "B")
    row = _row(hm, decode, it, "full", [hm.token_id(a.answer), hm.token_id(b.marker), hm.token_id(b.marker)])
    assert (row["retrieval"], row["language"], row["persona"], row["persona_source"]) == (1, 1, 1, "A")
    plain = forms[a.language][a.pairs[a.query][1]]  # the right value without a persona
    row = _row(hm, decode, it, "kv_only", [hm.token_id(plain), hm.token_id(a.marker), hm.token_id(a.marker)])
    assert (row["retrieval"], row["language"], row["persona"], row["persona_source"]) == (1, 1, 0, "other")


def test_full_condition_rows_match_generation_from_the_whole_prompt(hm):
    items = make_items(hm, 2, 6, 4, "chat", 2)
    rows = [r for r in run_items(hm, items, 2, MARKERS, 2, batch_size=4) if r["condition"] == "full"]
    ids, _ = hm.encode([it.a.text for it in items])
    tokens, _ = greedy(hm, ids, 2)
    assert [r["generated"] for r in rows] == [hm.tokenizer.decode(t).strip() for t in tokens.tolist()]
    concept = {hm.token_id(form): c for table in language_forms(2) for c, form in table.items() if c in VALUES}
    queried = [it.a.pairs[it.a.query][1] for it in items]
    firsts = tokens[:, 0].tolist()
    assert [r["retrieval"] for r in rows] == [int(concept.get(t) == q) for t, q in zip(firsts, queried, strict=True)]


def test_retention_is_the_ratio_of_means_with_paired_intervals():
    rows = []
    for seed in (1, 2):
        for i in range(50):
            base = {"seed": seed, "item": i, "language": 1, "persona": 1}
            rows.append({**base, "condition": "full", "retrieval": int(i < 40)})
            rows.append({**base, "condition": "kv_only", "retrieval": int(i < 10), "persona": int(i % 2)})
    table = {(r["condition"], r["property"]): r for r in retention(rows, ("full", "kv_only"), n_boot=500)}
    assert table[("full", "retrieval")]["retention"] == 1.0
    r = table[("kv_only", "retrieval")]
    assert r["metric"] == pytest.approx(0.2) and r["retention"] == pytest.approx(0.25)
    assert r["retention_lo"] < 0.25 < r["retention_hi"] and r["per_seed"] == "0.200,0.200"
    assert table[("kv_only", "persona")]["retention"] == pytest.approx(0.5)


def test_attribution_fractions_sum_to_one_per_style(hm):
    rows = run_items(hm, make_items(hm, 4, 8, 4, "chat", 2), 3, MARKERS, 2)
    table = attribution(rows)
    for style in ("language", "persona"):
        assert sum(r["fraction"] for r in table if r["style"] == style) == pytest.approx(1.0)
    assert {r["condition"] for r in rows} == set(CONDITIONS)
    assert np.isin([r["content_source"] for r in rows], ["A", "B", "A_dict", "B_dict", "other"]).all()
