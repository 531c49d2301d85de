"""Two runs compared output by output: answers exactly, floats within half of float32's digits."""

import json

import numpy as np
import pandas as pd
import pytest

from hybridlens.compare_runs import RTOL, compare_runs, main
from hybridlens.store import write_store

ITEMS = pd.DataFrame(  # an empty cell reads back as missing in both runs
    {"item": [0, 1, 2], "block": ["", "address", ""], "answers_a": [1, 0, 1], "generated": ["a b", "c d", "e f"]}
    | {"d_ab": [12.5, -3.0, 0.25]}
)


def _run(root, items=ITEMS, summary=None, store_scale=1.0, curve=(2.0, 1.5)):
    (root / "results/circuit/toy").mkdir(parents=True)
    items.to_csv(root / "results/circuit/toy/items.csv", index=False)
    summary = summary or {"reader": {"layer": 3, "head": 1}, "intact": {"accuracy": 0.75, "d": 4.0}}
    (root / "results/circuit/toy/circuit.json").write_text(json.dumps(summary))
    (root / "results/activations/toy").mkdir(parents=True)
    data = {"layers.0.resid_pre": np.linspace(-2, 2, 24, dtype=np.float32).reshape(2, 3, 4) * store_scale}
    write_store(root / "results/activations/toy/chat.h5", data, {"model_source": "zoo/toy"}, kind="activations")
    (root / "results/hla/adapt/toy").mkdir(parents=True)
    pd.DataFrame({"step": [0, 1], "task": ["mqar", "mqar"], "loss": list(curve)}).to_csv(
        root / "results/hla/adapt/toy/curve.csv", index=False
    )
    return root


def _verdicts(a, b):
    return {r.path: r for r in compare_runs(a, b)}


def test_identical_runs_agree_and_rounding_within_half_the_digits_passes(tmp_path):
    a = _run(tmp_path / "a")
    nudged = ITEMS.assign(d_ab=ITEMS["d_ab"] * (1 + RTOL / 4))
    b = _run(tmp_path / "b", items=nudged, store_scale=1 + RTOL / 4)
    results = _verdicts(a, b)
    assert sorted(results) == [
        "activations/toy/chat.h5",
        "circuit/toy/circuit.json",
        "circuit/toy/items.csv",
        "hla/adapt/toy/curve.csv",
    ]
    assert all(r.ok for r in results.values()), [r.problems for r in results.values()]
    assert "every answer identical" in results["circuit/toy/items.csv"].what
    assert main([str(a), str(a)]) == 0


@pytest.mark.parametrize(
    ("change", "path", "problem"),
    [
        ({"items": ITEMS.assign(answers_a=[1, 1, 1])}, "circuit/toy/items.csv", "row 1 column answers_a: 0 against 1"),
        ({"items": ITEMS.assign(generated=["a b", "c x", "e f"])}, "circuit/toy/items.csv", "row 1 column generated"),
        ({"items": ITEMS.assign(block=["address", "address", ""])}, "circuit/toy/items.csv", "row 0 column block"),
        (
            {"items": ITEMS.assign(d_ab=[12.5, -3.0, 0.25 + 20 * RTOL])},
            "circuit/toy/items.csv",
            "column d_ab: relative",
        ),
        (
            {"summary": {"reader": {"layer": 3, "head": 2}, "intact": {"accuracy": 0.75, "d": 4.0}}},
            "circuit/toy/circuit.json",
            "reader.head: 1 against 2",
        ),
        (
            {"summary": {"reader": {"layer": 3, "head": 1}, "intact": {"accuracy": 0.75, "d": 4.01}}},
            "circuit/toy/circuit.json",
            "intact.d: 4.0 against 4.01",
        ),
        ({"store_scale": 1.01}, "activations/toy/chat.h5", "layers/0/resid_pre: relative difference"),
        ({"curve": (2.001, 1.5)}, "hla/adapt/toy/curve.csv", "column loss: relative"),
    ],
)
def test_a_changed_answer_or_a_float_beyond_the_tolerance_fails(tmp_path, capsys, change, path, problem):
    a, b = _run(tmp_path / "a"), _run(tmp_path / "b", **change)
    results = _verdicts(a, b)
    assert [p for p, r in results.items() if not r.ok] == [path]
    assert any(problem in p for p in results[path].problems), results[path].problems
    assert main([str(a), str(b)]) == 1 and f"FAIL {path}" in capsys.readouterr().out


def test_measurements_of_rounding_itself_are_not_compared(tmp_path):
    a, b = _run(tmp_path / "a"), _run(tmp_path / "b")
    for run, ulps in ((a, 35.0), (b, 30.5)):  # how far two paths of one run differ: rounding, by definition
        (run / "results/circuit/toy/validated.json").write_text(json.dumps([{"name": "shortcut_path", "ulps": ulps}]))
    assert "circuit/toy/validated.json" not in _verdicts(a, b)


def test_training_inside_the_run_is_judged_before_its_first_step_only(tmp_path):
    a, b = _run(tmp_path / "a"), _run(tmp_path / "b", curve=(2.0, 1.7))
    curve = _verdicts(a, b)["hla/adapt/toy/curve.csv"]
    assert curve.ok and "trained in the run (not judged): differs after training: column loss" in curve.what


def test_a_missing_output_fails_unless_skipped_and_an_empty_run_is_refused(tmp_path):
    a, b = _run(tmp_path / "a"), _run(tmp_path / "b")
    (b / "results/circuit/toy/items.csv").unlink()
    assert _verdicts(a, b)["circuit/toy/items.csv"].what == "missing in run B"
    assert main([str(a), str(b)]) == 1 and main([str(a), str(b), "--skip", "circuit/*/items.csv"]) == 0
    with pytest.raises(FileNotFoundError, match="holds no tables"):
        compare_runs(tmp_path / "nothing", a)
