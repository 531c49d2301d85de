"""Circuit localization and transplants on the tiny saved models of every family."""

import pytest
import torch

from hybridlens.experiments.circuit import (
    VALIDATIONS,
    control_group,
    localize,
    localize_reference,
    summarize,
    transplant,
)
from hybridlens.interventions import on_items, patch
from hybridlens.interventions.engine import Edit, mixer_sites
from hybridlens.interventions.hooks import Trace
from hybridlens.interventions.patch import run
from hybridlens.tasks import triples
from hybridlens.tasks.retrieval import make_prompts
from hybridlens.validation import assert_paths_close, judge, path_ulps


def a_circuit(hm):
    """A circuit dict as localize() returns it, with the first group as the Address block."""
    layer = hm.attention_layers()[-1]
    return {"address": {"group": 0}, "reader": {"layer": layer, "head": 0}}


def test_triples(hm):
    items = triples(hm, 2, 10, 4, "chat")
    assert items == triples(hm, 2, 10, 4, "chat")
    for t in items:
        assert t.donor.pairs == t.host.pairs and t.donor.query != t.host.query
        key_a, value_a = t.donor.pairs[t.donor.query]
        assert t.other.pairs[t.other.query][0] == key_a and t.other.pairs[t.other.query][1] != value_a
        assert not {v for _, v in t.other.pairs} & {v for _, v in t.donor.pairs}
        lengths = {hm.encode([p.text])[0].shape[1] for p in (t.donor, t.host, t.other)}
        assert len(lengths) == 1


def test_identity_transplants_are_bit_identical_and_the_shortcut_within_path_ulps(hm):
    items = triples(hm, 1, 6, 4, "chat")
    checks = {}
    rows = transplant(hm, items, a_circuit(hm), control_group=None, checks=checks)
    assert set(checks) == set(VALIDATIONS)
    for name in ("identity_query", "identity_state"):
        assert checks[name].max_abs_diff == 0 and checks[name].n > 0 and judge(checks[name], 0)["passed"]
    assert checks["shortcut_path"].ulps <= path_ulps(torch.float32) and checks["shortcut_path"].magnitude > 0
    # The identity rows of the table say the same: D as the intact host's, to the bit.
    base = {r["item"]: r["d_ab"] for r in rows if r["kind"] == "none"}
    assert all(r["d_ab"] == base[r["item"]] for r in rows if (r["kind"], r["donor"]) == ("query", "identity"))
    kinds = {(r["kind"], r["donor"], r["positions"]) for r in rows}
    assert ("query", "same_dict", "dict") in kinds and ("state", "other_dict", "final") in kinds
    # A real donor changes the host's output; the dict-position transplant of the same dictionary does not.
    moved = [abs(r["d_ab"] - base[r["item"]]) for r in rows if (r["kind"], r["donor"]) == ("query", "same_dict")]
    assert max(moved) > 1e-3


def test_a_patch_that_writes_other_values_fails_the_identity_check(hm, monkeypatch):
    """A broken patch (it adds 1e-3 to what it writes) is caught, however small the error."""
    scatter = patch._scatter
    monkeypatch.setattr(patch, "_scatter", lambda t, idx, values: scatter(t, idx, values + 1e-3))
    checks = {}
    transplant(hm, triples(hm, 1, 4, 4, "chat"), a_circuit(hm), control_group=None, checks=checks)
    verdict = judge(checks["identity_query"], 0)
    assert not verdict["passed"] and verdict["max_abs_diff"] > 0
    assert judge(checks["identity_state"], 0)["passed"]  # copying states does not go through the patch


def test_final_write_removal_equals_a_patch_with_zeros(hm):
    prompts = make_prompts(3, 4, 4, "chat", 2)
    runner, _ = on_items.runner(hm, prompts)
    sites = mixer_sites(hm.groups[0])
    zeros = torch.zeros(len(prompts), 1, hm.d_model)
    logits, _, _ = runner.forward({s: Edit([runner.ids.shape[1] - 1], zeros) for s in sites})
    reference = run(hm, runner.ids, patch={s: ([-1], zeros) for s in sites}).logits[:, -1]
    assert_paths_close(logits, reference.float())


def test_head_ablation_zeroes_exactly_one_head(hm):
    prompts = make_prompts(3, 2, 4, "chat", 2)
    runner, _ = on_items.runner(hm, prompts)
    layer = hm.attention_layers()[0]
    proj, n_heads, dim = hm.head_mixer(layer)
    # The trace is registered first: it sees the heads before the ablation and the projection after it.
    with Trace(proj, retain_input=True, retain_output=True) as t:
        runner.forward(heads_off={layer: [1]})
    heads = t.input.clone()
    assert n_heads * dim == heads.shape[-1] and heads[..., dim : 2 * dim].abs().max() > 0
    heads[..., dim : 2 * dim] = 0
    torch.testing.assert_close(t.output, proj(heads), atol=1e-6, rtol=0)


def test_final_attention_rows_are_distributions(hm):
    runner, _ = on_items.runner(hm, make_prompts(3, 3, 4, "chat", 2))
    _, attn, _ = runner.forward(attention=hm.attention_layers())
    assert set(attn) == set(hm.attention_layers())
    for a in attn.values():
        torch.testing.assert_close(a.sum(-1), torch.ones(a.shape[:2]), atol=1e-5, rtol=0)


def test_localize_reports_evidence_for_every_choice(hm):
    prompts = make_prompts(0, 8, 4, "chat", 2)
    circuit, ablation, readers = localize(hm, prompts)
    assert len(ablation) == 2 * len(hm.groups)
    _, n_heads, _ = hm.head_mixer(hm.attention_layers()[0])
    assert len(readers) == n_heads * len(hm.attention_layers())
    assert (circuit["reader"]["layer"], circuit["reader"]["head"]) == (readers[0]["layer"], readers[0]["head"])
    assert circuit["encode"]["evidence"]["mode"] == "zero"
    for e in circuit["address"]["evidence"]:
        assert max(map(int, e["layers"].split("-"))) < circuit["reader"]["layer"]


def test_a_config_sections_reader_key_holds_the_reference_search_to_the_last_layer(hm):
    section = {"n_pairs": 4, "format": "chat", "localize_seed": 0, "localize_n": 8}
    circuit, _, readers = localize_reference(hm, section)
    assert (circuit["reader"]["layer"], circuit["reader"]["head"]) == (readers[0]["layer"], readers[0]["head"])
    assert circuit["task"] == {"format": "chat", "framing": "toy", "keys": 62, "values": 64, "languages": 2}
    circuit, _, _ = localize_reference(hm, section | {"reader": "last"})
    best = next(r for r in readers if r["layer"] == hm.attention_layers()[-1])
    assert (circuit["reader"]["layer"], circuit["reader"]["head"]) == (best["layer"], best["head"])


def test_the_reader_search_can_be_held_to_the_last_attention_layer(hm):
    prompts = make_prompts(0, 8, 4, "chat", 2)
    _, _, readers = localize(hm, prompts)
    circuit, _, same = localize(hm, prompts, search="last")
    assert same == readers  # the ranking is reported whole; only the choice changes
    best = next(r for r in readers if r["layer"] == hm.attention_layers()[-1])
    assert (circuit["reader"]["layer"], circuit["reader"]["head"]) == (best["layer"], best["head"])
    assert [e["group"] for e in circuit["address"]["evidence"]] == [
        g for g, group in enumerate(hm.groups) if max(group) < best["layer"]
    ]
    with pytest.raises(ValueError, match="unknown reader search 'first'; use 'any' or 'last'"):
        localize(hm, prompts, search="first")


def test_control_group_has_the_address_size():
    class Q:  # the adapter's groups for a LLLALLLA-style and a Falcon-style model
        groups = [[0, 1, 2], [4, 5, 6], [8]]

    assert control_group(Q, 1) == 0 and control_group(Q, 0) == 1 and control_group(Q, 2) == 1
    assert control_group(Q, None) is None


def test_summarize_rates_and_intervals():
    rows = [
        {"seed": s, "item": i, "kind": "query", "block": "address", "donor": "same_dict", "positions": "final",
         "answers_a": int(i < 9), "answers_b": int(i >= 9), "d_ab": 1.0, "attn_a": 0.5, "attn_b": 0.1}
        for s in (1, 2, 3) for i in range(10)
    ]  # fmt: skip
    (row,) = summarize(rows, n_boot=500)
    assert row["n"] == 30 and row["redirect"] == pytest.approx(0.9) and row["answers_b"] == pytest.approx(0.1)
    assert row["redirect_lo"] < 0.9 < row["redirect_hi"] and row["redirect_per_seed"] == "0.900,0.900,0.900"
