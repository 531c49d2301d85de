"""The long-context suite and the from-scratch models."""

import json
import random

import pytest
import torch

from hybridlens.experiments.long_context import (
    SUITE,
    Symbols,
    batch,
    build,
    build_from_spec,
    evaluate,
    load_shipped,
    make_item,
    router_gates,
    save_model,
    train,
)
from hybridlens.models.hla import HLALayer, to_hla
from hybridlens.models.source import SourceError
from hybridlens.models.toy import build_toy_model
from hybridlens.store import ship_directory
from hybridlens.validation import assert_paths_close

SYM = Symbols.synthetic()


@pytest.mark.parametrize("task", SUITE)
def test_items_ask_for_what_the_context_holds(task):
    rng = random.Random(0)
    for length in (64, 256):
        ids, targets = make_item(task, rng, length, SYM)
        assert abs(len(ids) - length) <= 4 and targets
        for pos, token in targets:
            assert ids[pos] == token and token in SYM.values
            # The question right before the first answer: QUERY key ASSIGN; the key is bound in the context.
            first = targets[0][0]
            assert ids[first - 3] == SYM.query and ids[first - 1] == SYM.assign
        key = ids[targets[0][0] - 2]
        bound = [i for i in range(targets[0][0] - 3) if ids[i] == key and ids[i + 1] == SYM.assign]
        assert bound, task
        if task != "variable_tracking":  # the value follows its key's binding directly
            assert any(ids[i + 2] == targets[0][1] for i in bound)
    assert make_item(task, random.Random(5), 128, SYM) == make_item(task, random.Random(5), 128, SYM)


def test_batches_label_only_answers():
    ids, labels = batch("niah_multiquery", random.Random(1), 3, 64, SYM)
    assert ids.shape == labels.shape and ((labels != -100).sum(1) == 2).all()
    assert torch.equal(ids[labels != -100], labels[labels != -100])


def test_to_hla_starts_as_the_original_model():
    torch.manual_seed(0)
    model = build_toy_model("qwen3_5", SYM.vocab_size, 32, "LLA", heads=2, seed=0).double()
    ids, _ = batch("mqar", random.Random(2), 2, 40, SYM)
    with torch.no_grad():
        before = model(ids, use_cache=False).logits
        to_hla(model, "hla", chunk=8, bucket=4, gate_bias=60.0)  # gates = 1 to float64 precision
        after = model(ids, use_cache=False).logits
    assert sum(isinstance(m, HLALayer) for m in model.modules()) == 2
    assert_paths_close(after, before, dtype=torch.float32)  # the GDN kernels compute in float32 whatever the model's
    with pytest.raises(ValueError, match="no Gated DeltaNet"):  # a family HLA converts, but no GDN layer in it
        to_hla(build_toy_model("qwen3_5", SYM.vocab_size, 32, "AA", heads=2))


@pytest.mark.parametrize("mode", ["gdn", "hla"])
def test_training_lowers_the_loss_and_evaluation_counts_answers(mode):
    model = build(mode, SYM, 32, 1, 2, seed=0, chunk=8, bucket=4)
    curve = train(model, SYM, 32, 60, 8, 3e-3, seed=0)
    first = sum(r["loss"] for r in curve[:9]) / 9
    last = sum(r["loss"] for r in curve[-9:]) / 9
    assert last < first - 0.3, (first, last)
    rows = evaluate(model, SYM, [32, 64], n=5, seed=1, tasks=("niah_single", "niah_multiquery"))
    assert [(r["task"], r["length"], r["answers"]) for r in rows] == [
        ("niah_single", 32, 5),
        ("niah_single", 64, 5),
        ("niah_multiquery", 32, 10),
        ("niah_multiquery", 64, 10),
    ]
    assert rows == evaluate(model, SYM, [32, 64], n=5, seed=1, tasks=("niah_single", "niah_multiquery"))


SPEC = {"mode": "hla", "seed": 3, "symbols": 8, "hidden": 16, "layers": 1, "heads": 2, "chunk": 8, "bucket": 4}
SPEC |= {"train_length": 32, "steps": 3, "batch_size": 2, "lr": 3e-3, "reg": 0.01}


def test_a_shipped_model_reloads_with_identical_evaluation(tmp_path):
    model, sym = build_from_spec(SPEC)
    train(model, sym, 32, 3, 2, 3e-3, seed=3)
    run = tmp_path / "trained"
    run.mkdir()
    save_model(model, run / "model.safetensors")
    (run / "training.json").write_text(json.dumps(SPEC))
    ship_directory(sorted(run.iterdir()), tmp_path / "zoo/hla_s3", {"model": "hla/hla_s3"})
    shipped, _ = load_shipped(tmp_path / "zoo/hla_s3", SPEC)
    ids, _ = batch("mqar", random.Random(0), 4, 32, sym)
    with torch.no_grad():
        assert torch.equal(shipped(ids, use_cache=False).logits, model.eval()(ids, use_cache=False).logits)
    assert evaluate(shipped, sym, [32], 4, seed=1) == evaluate(model, sym, [32], 4, seed=1)


def test_a_shipped_model_is_refused_when_its_spec_or_files_differ(tmp_path):
    model, sym = build_from_spec(SPEC)
    save_model(model, tmp_path / "model.safetensors")
    (tmp_path / "training.json").write_text(json.dumps(SPEC))
    ship_directory(sorted(tmp_path.glob("*.*")), tmp_path / "zoo", {"model": "hla/hla_s3"})
    with pytest.raises(SourceError, match=r"zoo was trained with hidden=16 \(config: 32\), steps=3 \(config: 600\); "):
        load_shipped(tmp_path / "zoo", SPEC | {"hidden": 32, "steps": 600})
    (tmp_path / "zoo/model.safetensors").write_bytes(b"\0" * 8)
    with pytest.raises(SourceError, match="model.safetensors"):
        load_shipped(tmp_path / "zoo", SPEC)


def test_a_model_shipped_before_the_later_training_keys_counts_as_trained_with_their_old_values(tmp_path):
    model, _ = build_from_spec(SPEC)
    save_model(model, tmp_path / "model.safetensors")
    (tmp_path / "training.json").write_text(json.dumps(SPEC))  # no router, gate_bias, reg_warmup: shipped before them
    ship_directory(sorted(tmp_path.glob("*.*")), tmp_path / "zoo", {"model": "hla/hla_s3"})
    load_shipped(tmp_path / "zoo", SPEC | {"router": "hybridlens", "gate_bias": 0.0, "reg_warmup": 0.0})
    with pytest.raises(SourceError, match=r"router='hybridlens' \(config: 'cosine'\)"):
        load_shipped(tmp_path / "zoo", SPEC | {"router": "cosine", "gate_bias": 0.0})


def test_the_regularizers_join_after_the_warmup_fraction_of_the_steps():
    def run(**reg):
        model, sym = build_from_spec(SPEC | {"gate_bias": 2.0, "router": "cosine"})
        return [c["loss"] for c in train(model, sym, 32, 4, 2, 3e-3, seed=3, **reg)], model.state_dict()

    plain, plain_weights = run(reg=0.0)
    late, late_weights = run(reg=1.0, reg_warmup=0.5)
    never, never_weights = run(reg=1.0, reg_warmup=1.0)
    assert never == plain and all(torch.equal(never_weights[k], w) for k, w in plain_weights.items())
    # Two steps without them, so the third loss (after two updates) is the same; the fourth is not.
    assert late[:3] == plain[:3] and late[3] != plain[3]
    assert not torch.equal(
        late_weights["model.layers.0.linear_attn.mixer.gate_bias"],
        plain_weights["model.layers.0.linear_attn.mixer.gate_bias"],
    )


@pytest.mark.parametrize("mode", ["fixed", "hla"])
def test_gate_bias_sets_the_initial_gates_and_router_reaches_the_mixers(mode):
    spec = SPEC | {"mode": mode, "gate_bias": 2.0, "router": "cosine"}
    model, sym = build_from_spec(spec)
    mixer = next(m for m in model.modules() if isinstance(m, HLALayer)).mixer
    assert mixer.router_kind == "cosine" and torch.equal(mixer.gate_bias, torch.full((2,), 2.0))
    ids, _ = batch("mqar", random.Random(0), 2, 32, sym)
    with torch.no_grad():
        model(ids, use_cache=False)
    gates = mixer.last_gates[mixer.last_gates > 0]  # earlier chunks only
    if mode == "fixed":  # distance logits start at 0: every gate is sigmoid(bias)
        torch.testing.assert_close(gates, torch.full_like(gates, torch.sigmoid(torch.tensor(2.0)).item()))
    else:  # with the router map at its initial identity, cosine scores lie in [-5, 5] around the bias
        assert gates.min() >= torch.sigmoid(torch.tensor(-3.0)) and gates.max() <= torch.sigmoid(torch.tensor(7.0))


def test_router_gates_sort_each_answers_earlier_chunks_by_what_they_hold():
    sym = Symbols.synthetic(8, 8, 16)  # the shipped models' symbols: MQAR then leaves filler at 64
    model = build("fixed", sym, 16, 1, 2, seed=0, chunk=8, bucket=4).eval()
    mixer = next(m for m in model.modules() if hasattr(m, "distance_logit"))
    with torch.no_grad():
        mixer.distance_logit.fill_(1.5)  # every earlier chunk gets sigmoid(1.5)
        mixer.gate_bias.zero_()
    rows = router_gates(model, sym, [32, 64], n=3, seed=0)
    assert {r["chunk"] for r in rows if r["length"] == 64} == {"asked", "pairs", "filler"}
    assert all(abs(r["gate"] - torch.sigmoid(torch.tensor(1.5)).item()) < 1e-6 for r in rows)
    # At length 32 an item holds 5 pairs and asks 4 of them: each answer has exactly one asked chunk.
    assert [r["count"] for r in rows if r["length"] == 32 and r["chunk"] == "asked"] == [3 * 4]
    assert router_gates(build("gdn", sym, 16, 1, 2, seed=0, chunk=8, bucket=4), sym, [32], 2, 0) == []
