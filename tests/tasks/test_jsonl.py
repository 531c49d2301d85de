"""A user's own prompts: the JSONL task, its refusals, the task registry, and the library on its items."""

import dataclasses
import json

import pytest
import torch

from hybridlens import tasks
from hybridlens.experiments.extract import extract, logit_lens
from hybridlens.interventions.on_items import encode, runner, transplant
from hybridlens.models.adapter import HybridModel
from hybridlens.models.real_tokenizer import qwen_tokenizer
from hybridlens.models.realshape import REAL_CONFIGS
from hybridlens.models.toy import build_toy_model
from hybridlens.tasks.items import token_positions, turns
from hybridlens.tasks.jsonl import load
from hybridlens.validation import assert_paths_close

EXAMPLE = "config/tasks/example.jsonl"


def test_the_shipped_example_loads_with_its_spans_turns_and_partners():
    items = load(EXAMPLE)
    assert [it.name for it in items] == ["grape", "otter", "prefilled", "raw"]
    grape = items[0]
    for name, word in (("key1", "grape"), ("value1", "ice"), ("query", "grape"), ("value0", "fire")):
        assert turns(grape).joined[slice(*grape.spans[name])] == word
    assert "[[" not in grape.text and grape.choices == ("fire", "ice", "gold") and grape.lead == " "
    assert set(grape.partners) == {"donor", "corrupt"} and grape.partners["donor"].answer == "fire"
    prefilled = items[2]
    assert prefilled.prefill == "the value of harp is" and prefilled.system == ""
    assert turns(prefilled).joined[slice(*prefilled.spans["query"])] == "harp"
    assert items[3].raw and not grape.raw


def _write(tmp_path, *records):
    path = tmp_path / "mine.jsonl"
    path.write_text("\n".join(r if isinstance(r, str) else json.dumps(r) for r in records) + "\n")
    return path


@pytest.mark.parametrize(
    ("record", "message"),
    [
        ({"prompt": "a b"}, r"mine.jsonl:2: field 'answer' is missing or empty"),
        ({"prompt": "a", "messages": [], "answer": "x"}, r":2: give exactly one of the fields 'prompt', 'messages'"),
        ({"answer": "x"}, r":2: give exactly one of the fields .* \(got none\)"),
        ({"prompt": "a", "answer": "x", "anwser": "y"}, r":2: unknown field 'anwser'"),
        ({"messages": [{"role": "assistant", "content": "a"}], "answer": "x"}, r"has roles \['assistant'\]"),
        ({"messages": [{"role": "user"}], "answer": "x"}, r"'messages' must be a list of"),
        ({"prompt": "[[k:a]] [[k:b]]", "answer": "x"}, r":2: span 'k' marked twice"),
        ({"prompt": "[[1k:a]]", "answer": "x"}, r":2: a span mark is not \[\[name:text\]\]"),
        ({"prompt": "a", "answer": "x", "choices": ["y"]}, r"'choices' must hold the answer 'x'"),
        ({"prompt": "a", "answer": "x", "donor": {"prompt": "b"}}, r":2 \(donor\): field 'answer' is missing"),
        (
            {"prompt": "a", "answer": "x", "donor": {"prompt": "b", "answer": "y", "donor": {}}},
            r"unknown field 'donor'",
        ),
        ("{not json", r":2: not JSON"),
    ],
)
def test_a_line_missing_or_misusing_a_field_is_refused_naming_the_line_and_the_field(tmp_path, record, message):
    path = _write(tmp_path, {"prompt": "fine", "answer": "x"}, record)
    with pytest.raises(ValueError, match=message):
        load(path)


def test_the_registry_gives_each_kind_its_keys_and_refuses_another_kinds(tmp_path):
    path = _write(tmp_path, {"prompt": "fine", "answer": "x"})
    assert tasks.settings("mine", {"file": str(path)}) == {"file": str(path), "kind": "jsonl"}
    chat = tasks.settings("chat8", {"format": "chat", "n_pairs": 8})
    assert chat["kind"] == "dictionary" and chat["framing"] == "auto" and chat["n"] == 64
    with pytest.raises(ValueError, match=r"config tasks.mine: key 'n_pairs' is not one of a jsonl task's keys"):
        tasks.settings("mine", {"file": str(path), "n_pairs": 4})
    with pytest.raises(ValueError, match=r"config tasks.mine: a jsonl task needs the key 'file'"):
        tasks.settings("mine", {"kind": "jsonl"})
    with pytest.raises(ValueError, match=r"task file .*nope.jsonl does not exist"):
        tasks.settings("mine", {"file": str(tmp_path / "nope.jsonl")})
    with pytest.raises(ValueError, match=r"config tasks.d: format translate has no paper framing"):
        tasks.settings("d", {"format": "translate", "framing": "paper"})
    with pytest.raises(ValueError, match=r"config tasks.d.filler_file: only format long reads filler"):
        tasks.settings("d", {"format": "chat", "filler_file": str(path)})


def test_transplant_runner_and_extraction_run_on_a_jsonl_tasks_items(hm):
    items = load(EXAMPLE)
    with_donor = [it for it in items if "donor" in it.partners]
    donors = [it.partners["donor"] for it in with_donor]
    sites = [f"layers.{layer}.mixer_out" for layer in hm.groups[0]]
    # Items of different lengths are batched apart; the identity transplant is the intact forward.
    same = transplant(hm, with_donor, with_donor, sites, positions="query")
    for it, logits in zip(with_donor, same, strict=True):
        run, _ = runner(hm, [it], minimal=False)
        assert_paths_close(logits[None], run.forward()[0])
    moved = transplant(hm, donors, with_donor, sites, positions="final")
    assert moved.shape == same.shape and not torch.equal(moved, same)
    run, batch = runner(hm, items[:1])
    logits, _, _ = run.forward()
    assert batch.choices.shape == (1, 3) and run.correct(logits, [0]).shape == (1,)
    answer = [hm.tokenizer.convert_tokens_to_ids(it.answer) for it in items]
    data = extract(hm, items, sites + [f"layers.{i}.layer_out" for i in range(hm.n_layers)], "final")
    assert data["answer_ids"].tolist() == answer and data[sites[0]].shape == (len(items), 1, hm.d_model)
    assert len(logit_lens(hm, data)) == len(items) * hm.n_layers


def test_a_chat_model_frames_jsonl_turns_and_reads_raw_text_as_it_is():
    tok = qwen_tokenizer((REAL_CONFIGS / "Qwen3.5.chat_template.jinja").read_text())
    hm = HybridModel(build_toy_model("qwen3_5", len(tok), 32, "LLA", heads=2).eval(), tok)
    grape, _, prefilled, raw = load(EXAMPLE)
    text, _ = hm.render(turns(prefilled))
    assert text.startswith("<|im_start|>user\nDictionary : drum") and text.endswith("</think>\n\nthe value of harp is")
    assert hm.render(turns(raw))[0] == raw.text
    batch = encode(hm, [prefilled])
    query = token_positions(prefilled, batch.offsets[0], "query")  # Qwen's BPE splits harp: " har", "p"
    assert len(query) == 2 and hm.tokenizer.decode(batch.ids[0, query]) == " harp"
    assert hm.tokenizer.decode(batch.choices[0]) == " honey"
    assert transplant(hm, [grape.partners["donor"]], [grape], ["layers.0.mixer_out"], "query").shape == (1, len(tok))


def test_extraction_pads_items_of_different_lengths_and_equals_them_one_by_one(hm, monkeypatch):
    import dataclasses

    from hybridlens.interventions.on_items import batches

    items = load(EXAMPLE)
    assert len({len(ids) for ids in hm.tokenize([turns(it) for it in items])[0]}) == 4  # four lengths
    sites = [f"layers.{i}.layer_out" for i in range(hm.n_layers)]
    alone = extract(hm, items, sites, "final", batch_size=1)
    padded = extract(hm, items, sites, "final", batch_size=4)
    assert len(list(batches(hm, items, 4))) == 1  # one padded forward for four lengths
    monkeypatch.setattr(hm, "family", dataclasses.replace(hm.family, left_padding=False))
    grouped = extract(hm, items, sites, "final", batch_size=4)
    assert len(list(batches(hm, items, 4))) == 4  # a family that does not pad exactly: one length per batch
    for site in sites:
        assert_paths_close(torch.as_tensor(padded[site]), torch.as_tensor(alone[site]), site)
        assert torch.equal(torch.as_tensor(grouped[site]), torch.as_tensor(alone[site]))  # batches of one
    ids = hm.tokenize([turns(it) for it in items])[0]
    assert padded["lengths"].tolist() == [len(x) for x in ids]  # the store keeps each prompt's own tokens
    assert [row[: len(x)].tolist() for row, x in zip(padded["input_ids"], ids, strict=True)] == ids
    assert all((row[len(x) :] == -1).all() for row, x in zip(padded["input_ids"], ids, strict=True))
    for key in ("positions", "answer_ids", "input_ids", "lengths"):
        assert (padded[key] == alone[key]).all() and (grouped[key] == alone[key]).all()


def test_the_registry_gives_a_configured_tasks_items_and_counts(hm, tmp_path):
    import hybridlens.tasks.items  # noqa: F401  (the submodule beside the registry's function)

    mine = tasks.settings("mine", {"file": EXAMPLE})
    items, counts = tasks.items_of(hm, mine)
    assert [it.name for it in items] == ["grape", "otter", "prefilled", "raw"]
    assert counts == {"items": 4, "donor": 4, "corrupt": 1, "swap": 0}
    prompts, counts = tasks.items_of(hm, tasks.settings("chat4", {"n_pairs": 4, "n": 3}))
    assert len(prompts) == 3 and prompts[0].framing == "toy" and counts["languages"] == 2


def test_the_circuit_transplants_on_a_jsonl_tasks_items_and_refuses_an_item_without_a_donor(hm):
    from hybridlens.experiments.circuit import summarize_task, task_transplant

    items = load(EXAMPLE)
    circuit = {"address": {"group": 0}}
    rows = task_transplant(hm, items, circuit, batch_size=4)
    conditions = {(r["kind"], r["block"], r["positions"]) for r in rows}
    blocks = ["address"] + (["control_group"] if len(hm.groups) > 1 else [])
    # final and every span a donor and its item both name, one token each way (key0, value0, key1, ...)
    spans = sorted(set.intersection(*(set(it.spans) & set(it.partners["donor"].spans) for it in items)))
    assert spans == ["key0", "key1", "query", "value0", "value1"]
    assert conditions == {("none", "", "")} | {("state", b, "final") for b in blocks} | {
        ("query", b, p) for b in blocks for p in ["final", *spans]
    }
    intact = {r["item"]: r for r in rows if r["kind"] == "none"}
    assert all(r["answers_host"] in (0, 1) and r["answers_donor"] in (0, 1) for r in rows)
    assert {r["item"] for r in rows} == {"grape", "otter", "prefilled", "raw"}
    moved = [r for r in rows if r["kind"] == "query" and r["positions"] == "all"]
    assert not moved  # `all` is a position set, not a span both name
    assert any(r["d"] != intact[r["item"]]["d"] for r in rows if r["kind"] == "query")
    summary = summarize_task(rows, n_boot=50)
    assert {(s["kind"], s["block"], s["positions"]) for s in summary} == conditions and all(
        s["n"] == 4 for s in summary
    )
    # The item itself as its donor: every transplant gives back its own answer.
    same = [dataclasses.replace(it, partners={"donor": it}) for it in items]
    for r in task_transplant(hm, same, circuit, batch_size=4):
        assert r["answers_host"] == intact[r["item"]]["answers_host"]
    with pytest.raises(ValueError, match=r"otter: field 'donor' is missing"):
        task_transplant(hm, [same[0], dataclasses.replace(items[1], partners={})], circuit)
