"""Scale sweep: group sets, readers, transplants, blocking and the verdict on tiny saved models."""

from dataclasses import replace
from pathlib import Path

import pytest
import torch

from hybridlens.experiments import scale
from hybridlens.interventions import on_items
from hybridlens.interventions.engine import Edit, attention_to
from hybridlens.tasks import triples
from hybridlens.tasks.retrieval import make_prompts
from hybridlens.validation import assert_paths_close


def test_group_sets_are_singles_then_pairs_and_runs_before_the_last_attention_layer():
    groups = [[0, 1, 2], [4, 5, 6], [8, 9, 10], [12, 13, 14]]
    sets = scale.group_sets(groups, 11)
    assert sets[:4] == [(0,), (1,), (2,), (3,)]
    # Groups 0-2 precede the last attention layer (11): their pairs, then the run of all three.
    assert sets[4:] == [(0, 1), (0, 2), (1, 2), (0, 1, 2)]
    assert scale.set_name((0, 2)) == "G0+G2"


def test_attention_sets_are_the_pure_attention_layers_before_the_last():
    kinds = ["linear", "attention", "linear", "attention", "linear", "attention"]
    assert scale.attention_sets(kinds) == [1, 3]
    assert scale.attention_sets(["linear", "attention"]) == []
    # A parallel layer's write carries its linear half: it is transplanted as a group, never as an attention set.
    assert scale.attention_sets(["parallel", "parallel", "parallel"]) == []
    assert scale.attention_sets(["linear", "attention", "parallel"]) == [1]


def test_readers_take_each_layers_best_head_above_the_minimum_and_keep_the_main_reader():
    rows = [
        {"layer": 3, "head": 0, "attention_to_target": 0.6},
        {"layer": 3, "head": 1, "attention_to_target": 0.7},
        {"layer": 7, "head": 0, "attention_to_target": 0.1},
        {"layer": 11, "head": 2, "attention_to_target": 0.3},
    ]
    got = scale.readers(rows, {"layer": 3, "head": 1}, minimum=0.25)
    assert [(r["layer"], r["head"]) for r in got] == [(3, 1), (11, 2)]
    # A main reader below the minimum is still a reader.
    got = scale.readers(rows, {"layer": 7, "head": 0}, minimum=0.5)
    assert [(r["layer"], r["head"]) for r in got] == [(3, 1), (7, 0)]


def summary(rows):
    return [{"groups": g, "n_groups": n, "redirect": r} for g, n, r in rows]


@pytest.mark.parametrize(
    "rows, verdict, needed, best",
    [
        ([("none", 0, 0.0), ("G0", 1, 0.95), ("G1", 1, 0.1), ("G0+G1", 2, 0.97)], "concentrated", 1, "G0"),
        ([("none", 0, 0.0), ("G0", 1, 0.5), ("G1", 1, 0.6), ("G0+G1", 2, 0.93)], "distributed", 2, "G0+G1"),
        ([("none", 0, 0.0), ("G0", 1, 0.2), ("G1", 1, 0.3), ("G0+G1", 2, 0.5)], "not redirected", None, "G1"),
        # No group set moves the query, an earlier attention layer's write does: the query is built by attention.
        ([("none", 0, 0.0), ("G0", 1, 0.0), ("G0+G1", 2, 0.01), ("A1", 0, 0.97)], "built by attention", None, "A1"),
        ([("none", 0, 0.0), ("G0", 1, 0.0), ("G0+G1", 2, 0.01), ("A1", 0, 0.5)], "not redirected", None, "G0"),
        # A reader's write moves the value it read, not a query: layer 3 is the reader.
        ([("none", 0, 0.0), ("G0", 1, 0.0), ("G0+G1", 2, 0.01), ("A3", 0, 0.97)], "not redirected", None, "G0"),
        # A group set that redirects decides, whatever attention's write does.
        ([("none", 0, 0.0), ("G0", 1, 0.95), ("A1", 0, 0.97)], "concentrated", 1, "G0"),
    ],
)
def test_verdict(rows, verdict, needed, best):
    got = scale.verdict(summary(rows), [{"layer": 3, "head": 0}], threshold=0.9)
    assert (got["verdict"], got["groups_needed"], got["best_set"]) == (verdict, needed, best)
    assert got["best_single"] == max(((g, r) for g, n, r in rows if n == 1), key=lambda x: x[1])[0]


def test_transplant_from_the_host_itself_changes_nothing(hm):
    items = triples(hm, 1, 6, 4, "chat")
    hosts, _ = on_items.runner(hm, [t.host for t in items])
    readers = [{"layer": hm.attention_layers()[-1], "head": 0}]
    sets = scale.group_sets(hm.groups, max(hm.attention_layers()))
    attention = scale.attention_sets(hm.kinds)
    rows = scale.transplant_rows(hm, hosts, hosts, items, sets, readers, attention=attention)
    by_set = {}
    for r in rows:
        by_set.setdefault(r["groups"], []).append(r)
    base = by_set.pop("none")
    assert set(by_set) == {scale.set_name(s) for s in sets} | {f"A{layer}" for layer in attention}
    for rs in by_set.values():
        assert [r["redirect"] for r in rs] == [b["redirect"] for b in base]
        assert_paths_close(torch.tensor([r["d_ab"] for r in rs]), torch.tensor([b["d_ab"] for b in base]))


def test_transplant_from_the_donor_moves_d(hm):
    items = triples(hm, 1, 6, 4, "chat")
    hosts, _ = on_items.runner(hm, [t.host for t in items])
    donors, _ = on_items.runner(hm, [t.donor for t in items])
    readers = [{"layer": hm.attention_layers()[-1], "head": 0}]
    attention = scale.attention_sets(hm.kinds)
    rows = scale.transplant_rows(hm, hosts, donors, items, [tuple(range(len(hm.groups)))], readers, None, attention)
    base = [r["d_ab"] for r in rows if r["groups"] == "none"]
    for name in ["G" + "+G".join(str(g) for g in range(len(hm.groups)))] + [f"A{layer}" for layer in attention]:
        moved = [r["d_ab"] for r in rows if r["groups"] == name]
        # The untrained attention writes are small; 1e-4 is still the self-transplant test's tolerance.
        assert max(abs(a - b) for a, b in zip(moved, base, strict=True)) > (1e-4 if name[0] == "A" else 1e-3), name
    assert {f"r{readers[0]['layer']}.0_to_a", f"r{readers[0]['layer']}.0_to_b"} <= set(rows[0])


def test_blocking_at_the_final_position_only(hm):
    """The last attention layer's final-position output is all the logits see of it, so blocking a head there
    equals blocking it everywhere; in an earlier attention layer the two differ (later layers read it)."""
    runner, _ = on_items.runner(hm, make_prompts(3, 4, 4, "chat", 2))
    layers = hm.attention_layers()
    last = layers[-1]
    everywhere, _, _ = runner.forward(heads_off={last: [0]})
    final, _, _ = runner.forward(heads_off_final={last: [0]})
    assert_paths_close(final, everywhere)
    intact, _, _ = runner.forward()
    assert (final - intact).abs().max() > 1e-4
    if len(layers) > 1 and hm.kinds[layers[0]] == "attention":
        everywhere, _, _ = runner.forward(heads_off={layers[0]: [0]})
        final, _, _ = runner.forward(heads_off_final={layers[0]: [0]})
        assert (final - everywhere).abs().max() > 1e-4


def test_blocking_rows_pair_every_earlier_reader_with_every_later_one(hm):
    layers = hm.attention_layers()
    if len(layers) < 2:
        pytest.skip("one attention layer: no chain")
    items = triples(hm, 2, 4, 4, "chat")
    hosts, _ = on_items.runner(hm, [t.host for t in items])
    readers = [{"layer": layer, "head": 0} for layer in layers]
    rows = scale.blocking_rows(hm, hosts, items, readers)
    pairs = {(r["blocked"], r["reader"]) for r in rows}
    # Every earlier reader is blocked twice: its best head, and every head of its layer.
    later = [(a, b) for i, a in enumerate(layers) for b in layers[i + 1 :]]
    assert pairs == {(f"r{a}.{block}", f"r{b}.0") for a, b in later for block in ("0", "*")}
    summary = scale.summarize_blocking(rows)
    assert set(summary[0]) == set(scale.BLOCKING_COLUMNS)
    for s in summary:
        assert s["attention_intact_lo"] <= s["attention_intact"] <= s["attention_intact_hi"]


def test_blocking_a_whole_layer_equals_zeroing_its_final_write(hm):
    """With every head blocked at the final position, an attention layer without an output bias writes nothing
    there: the later reader and the answer see what a zero edit of the layer's write gives, and the reader
    something else than with one head blocked."""
    layers = hm.attention_layers()
    if len(layers) < 2 or hm.kinds[layers[0]] != "attention":
        pytest.skip("needs an attention-only layer before another reader")
    early, late = layers[0], layers[1]
    items = triples(hm, 2, 4, 4, "chat")
    hosts, host_tokens = on_items.runner(hm, [t.host for t in items])
    readers = [{"layer": early, "head": 0}, {"layer": late, "head": 0}]
    rows = scale.blocking_rows(hm, hosts, items, readers)
    whole = torch.tensor([r["attention_blocked"] for r in rows if r["blocked"] == f"r{early}.*"])
    one = torch.tensor([r["attention_blocked"] for r in rows if r["blocked"] == f"r{early}.0"])
    edit = {f"layers.{early}.mixer_out": Edit([-1], torch.zeros_like)}
    logits, attn, _ = hosts.forward(edit, attention=[late])
    entries = [t.host.query for t in items]
    zeroed = attention_to(attn[late], host_tokens.entry_positions(entries))[:, 0]
    torch.testing.assert_close(whole, zeroed, atol=0, rtol=0)
    assert (one - zeroed).abs().max() > 1e-6  # random weights: the final write barely moves a later query
    # Accuracy is the answer's: the value of the queried entry on top, intact and blocked.
    target = hosts.choices[torch.arange(len(items)), entries]
    accuracy = [r["accuracy_blocked"] for r in rows if r["blocked"] == f"r{early}.*"]
    assert accuracy == (logits.argmax(-1) == target).int().tolist()
    assert [r["accuracy_intact"] for r in rows if r["blocked"] == f"r{early}.*"] == (
        (hosts.forward()[0].argmax(-1) == target).int().tolist()
    )


def test_the_donors_entry_is_read_among_the_hosts_choices(hm):
    """The sweep reads the donor's answer among the host's choices: for a dictionary triple that is the
    donor's own queried entry, so a user's items (donor_triples) and the dictionary's are read alike."""
    from hybridlens.tasks.items import answer_index, donor_index, donor_triples, require_entries
    from hybridlens.tasks.jsonl import load

    for t in triples(hm, 1, 6, 4, "chat"):
        assert donor_index(t) == answer_index(t.donor) != answer_index(t.host)
    example = load(Path(__file__).parents[2] / "config/tasks/example.jsonl")[:1]  # its first line has choices
    require_entries(example, "scale.task")
    (t,) = donor_triples(example)
    assert (t.host, t.donor, t.other, donor_index(t)) == (example[0], example[0].partners["donor"], None, 0)
    with pytest.raises(ValueError, match=r"grape: choice 1 'ice' is not marked \[\[value1:ice\]\] \(no such span\)"):
        require_entries([replace(example[0], spans={})], "scale.task")
    with pytest.raises(ValueError, match=r"grape: choice 0 'ice' is not marked \[\[value0:ice\]\] \(it holds 'fire'\)"):
        require_entries([replace(example[0], choices=("ice", "fire", "gold"))], "scale.task")
