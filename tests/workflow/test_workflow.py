"""The Snakefile end to end on tests/config (three tiny toy models), in temporary directories."""

import hashlib
import json
import os
import re
import shutil
import subprocess
import time

import numpy as np
import pandas as pd
import pytest
import torch
import yaml
from wf import FAMILY_TOYS, MODELS, SNAKEMAKE, snakemake, workdir

from hybridlens import tasks
from hybridlens.experiments.extract import extract
from hybridlens.experiments.split_prefill import BASELINE, CONDITIONS, SAMPLE_COLUMNS, run_items
from hybridlens.experiments.stitch import CONDITIONS as STITCH_CONDITIONS
from hybridlens.experiments.stitch import TRANSFERS, fit_maps, map_scores, query_content
from hybridlens.models.adapter import load_model
from hybridlens.models.source import SourceError
from hybridlens.store import read_store
from hybridlens.tasks.retrieval import make_prompts
from hybridlens.zoo import evaluate_model, train_and_save


def test_eval_json_matches_a_fresh_evaluation(run1):
    config = yaml.safe_load((run1 / "tests/config/config.yaml").read_text())
    for name in MODELS:
        saved = json.loads((run1 / f"results/models/{name}/eval.json").read_text())
        hm = load_model(run1 / f"results/models/{name}")
        fresh = evaluate_model(hm, 9001, config["zoo"]["eval_n"], config["zoo"]["eval_pairs"])
        assert saved["rows"] == fresh


def test_store_equals_direct_extraction_and_records_provenance(run1):
    # Bit-equal needs the job's thread count: CPU reductions depend on it.
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        _check_store(run1)
    finally:
        torch.set_num_threads(threads)


def _check_store(run1):
    hm = load_model(run1 / "results/models/qwen_tiny")
    prompts = make_prompts(1, 6, 4, "chat", 2)
    sites = [f"layers.{i}.{s}" for i in range(hm.n_layers) for s in ("resid_pre", "mixer_out", "layer_out")]
    direct = extract(hm, prompts, sites, batch_size=4)  # the test config's batch size
    data, attrs = read_store(run1 / "results/activations/qwen_tiny/chat4.h5")
    assert set(sites) <= set(data)
    for site in sites:
        np.testing.assert_array_equal(data[site], direct[site])
    assert data["layers.0.resid_pre"].shape == (6, 1, 32)
    assert attrs["seed"] == 1 and attrs["kinds"] == ",".join(hm.kinds)
    assert {"model_source", "config_hash", "tokenizer_hash", "versions"} <= set(attrs)
    assert json.loads(attrs["versions"])["torch"] == torch.__version__


def test_logit_lens_tables(run1):
    lens = pd.read_csv(run1 / "results/activations/qwen_tiny/chat4.lens.tsv", sep="\t")
    assert len(lens) == 6 * 6 and lens["answer_rank"].between(1, 224).all()
    summary = pd.read_csv(run1 / "results/tables/logit_lens_chat4.tsv", sep="\t")
    q = summary[summary["model"] == "qwen_tiny"].set_index("layer")
    assert q["rank_median"].to_dict() == lens.groupby("layer")["answer_rank"].median().to_dict()
    assert list(q["kind"]) == ["linear", "linear", "attention"] * 2
    assert (run1 / "results/figures/logit_lens_chat4.pdf").read_bytes()[:4] == b"%PDF"


def test_split_prefill_tables(run1):
    cfg = yaml.safe_load((run1 / "tests/config/config.yaml").read_text())["split_prefill"]
    for name in MODELS + FAMILY_TOYS:
        out = run1 / f"results/split_prefill/{name}"
        items = pd.read_csv(out / "items.tsv", sep="\t")
        assert len(items) == len(cfg["seeds"]) * cfg["n"] * (len(CONDITIONS) + 1)  # + the no-persona baseline
        assert set(items["condition"]) == {*CONDITIONS, BASELINE}
        table = pd.read_csv(out / "retention.tsv", sep="\t").set_index(["condition", "property"])
        for (condition, prop), row in table.iterrows():
            assert row["metric"] == pytest.approx(items.loc[items["condition"] == condition, prop].mean())
        full = table.xs("full", level="condition")
        assert ((full["retention"] == 1.0) | (full["metric"] == 0)).all()
        samples = pd.read_csv(out / "samples.tsv", sep="\t")
        first = items[(items["seed"] == cfg["seeds"][0]) & (items["item"] < cfg["n_samples"])]
        assert samples.equals(first[list(SAMPLE_COLUMNS)].reset_index(drop=True))
    # The job's rows equal a direct run on the saved model (one thread, as in the job).
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        hm = load_model(run1 / "results/models/qwen_tiny")
        spec = tasks.settings("split_prefill", {"kind": "style", "n": cfg["n"], "n_pairs": cfg["n_pairs"]}, "here")
        lexicon = tasks.module("style").lexicon(hm, spec)
        assert lexicon.kind == "toy"  # the toys keep their own devices
        direct = run_items(hm, tasks.items_of(hm, spec | {"seed": 1})[0], 3, lexicon, seed=1)
    finally:
        torch.set_num_threads(threads)
    styles = {"language_of_a": str, "identified_language": str}  # toy languages are named by their index
    items = pd.read_csv(
        run1 / "results/split_prefill/qwen_tiny/items.tsv", sep="\t", keep_default_na=False, dtype=styles
    )
    assert items[items["seed"] == 1].to_dict("records") == direct
    combined = pd.read_csv(run1 / "results/tables/split_prefill_retention.tsv", sep="\t")
    assert list(dict.fromkeys(combined["model"])) == MODELS + FAMILY_TOYS
    for figure in ("split_prefill_retention", "state_swap"):
        assert (run1 / f"results/figures/{figure}.pdf").read_bytes()[:4] == b"%PDF"


def test_circuit_tables(run1):
    cfg = yaml.safe_load((run1 / "tests/config/config.yaml").read_text())["circuit"]
    for name in MODELS + FAMILY_TOYS:
        out = run1 / f"results/circuit/{name}"
        circuit = json.loads((out / "circuit.json").read_text())
        readers = pd.read_csv(out / "readers.csv")
        assert (circuit["reader"]["layer"], circuit["reader"]["head"]) == tuple(readers.iloc[0][["layer", "head"]])
        if circuit["address"]["group"] is None:  # e.g. a reader in Falcon's first layer: nothing to transplant
            continue
        verdicts = {v["name"]: v for v in json.loads((out / "validated.json").read_text())}
        assert verdicts["identity_query"]["max_abs_diff"] == verdicts["identity_state"]["max_abs_diff"] == 0
        assert verdicts["shortcut_path"]["passed"] and verdicts["shortcut_path"]["allowed_ulps"] > 0
        items = pd.read_csv(out / "items.csv")
        table = pd.read_csv(out / "transplant.csv")
        assert (table["n"] == len(cfg["seeds"]) * cfg["n"]).all()
        final = table.set_index(["kind", "block", "donor", "positions"]).loc[("query", "address", "same_dict", "final")]
        chosen = items[(items["kind"] == "query") & (items["block"] == "address") & (items["donor"] == "same_dict")]
        assert final["redirect"] == pytest.approx(chosen[chosen["positions"] == "final"]["answers_a"].mean())


def test_scale_tables(run1):
    cfg = yaml.safe_load((run1 / "tests/config/config.yaml").read_text())["scale"]
    sizes = pd.read_csv(run1 / "results/scale/sizes.tsv", sep="\t")
    assert list(sizes["model"]) == cfg["models"]
    transplant = pd.read_csv(run1 / "results/scale/transplant.tsv", sep="\t")
    profile = pd.read_csv(run1 / "results/scale/profile.tsv", sep="\t")
    for size in sizes.itertuples():
        rows = pd.read_csv(run1 / f"results/scale/{size.model}/items.csv.gz")
        t = transplant[transplant["model"] == size.model].set_index("groups")
        n_groups = len(size.groups.split())
        assert {f"G{g}" for g in range(n_groups)} <= set(t.index)
        assert (t["n"] == len(cfg["seeds"]) * cfg["n"]).all()
        # Every summary row is the mean of its item rows.
        moved = rows[rows["kind"] == "transplant"].groupby("groups")["redirect"].mean()
        assert t["redirect"].to_dict() == pytest.approx(moved.to_dict())
        p = profile[profile["model"] == size.model].set_index("group")
        none = p.loc["none"]  # the intact model, relative to itself (an untrained tiny model may score 0)
        assert none["accuracy_relative"] == 1.0 or (none["accuracy"] == 0 and np.isnan(none["accuracy_relative"]))
        assert none["d_relative"] == pytest.approx(1.0) and len(p) == n_groups + 1
        # The verdict follows from the table: the smallest set at or above the threshold.
        hits = t[(t["n_groups"] > 0) & (t["redirect"] >= cfg.get("redirect", 0.9))]
        expected = hits["n_groups"].min() if len(hits) else None
        assert (None if pd.isna(size.groups_needed) else size.groups_needed) == expected
    for figure in ("redirect", "removal", "chain", "groups_needed"):
        assert (run1 / f"results/figures/scale_{figure}.pdf").read_bytes()[:4] == b"%PDF"


def test_stitch_tables_and_maps(run1):
    cfg = yaml.safe_load((run1 / "tests/config/config.yaml").read_text())["stitch"]
    pair = run1 / "results/stitch/qwen_tiny--granite_tiny"
    summary = pd.read_csv(pair / "summary.tsv", sep="\t")
    rows = pd.concat([pd.read_csv(f) for f in sorted(pair.glob("items_*_s*.csv"))])
    assert set(rows["receiver"]) == {"qwen_tiny", "granite_tiny"} and set(rows["seed"]) == set(cfg["seeds"])
    assert len(summary) == 2 * len(TRANSFERS) * len(STITCH_CONDITIONS)
    for r in summary.itertuples():
        items = rows[(rows["receiver"] == r.receiver) & (rows["transfer"] == r.transfer)]
        items = items[items["condition"] == r.condition]
        measure = "redirect" if r.transfer == "query" else "correct"
        assert r.rate == pytest.approx(items[measure].mean()) and r.n == len(cfg["seeds"]) * cfg["n_test"]
        assert r.lo <= r.rate <= r.hi
    # The intact receiver is the same forward for every transfer.
    intact = rows[rows["condition"] == "intact"].pivot_table("correct", ["receiver", "seed", "item"], "transfer")
    assert (intact["query"] == intact["address"]).all() and (intact["address"] == intact["encode_address"]).all()
    # The maps artifact is what fit_maps gives on the stored activations; one tokenizer aligns everything.
    fit = pd.read_csv(pair / "fit.tsv", sep="\t")
    assert (fit["aligned"] == 1.0).all() and set(fit["lambda"]) <= set(cfg["lambdas"])
    recv, recv_attrs = read_store(pair / "acts/qwen_tiny_s1.h5")
    donor, donor_attrs = read_store(pair / "acts/granite_tiny_s1.h5")
    spans = [{k: tuple(v) for k, v in json.loads(a["blocks"]).items()} for a in (recv_attrs, donor_attrs)]
    maps, _, _ = fit_maps(recv, donor, *spans, cfg["lambdas"])
    stored, _ = read_store(pair / "maps_s1.h5")
    for name, m in maps.items():
        np.testing.assert_allclose(stored[f"qwen_tiny.{name}.weight"], m.weight, rtol=1e-5, atol=1e-6)
    # r2_test is each map scored on the test-key prompts' stores, the prompts every rate comes from.
    tests = [read_store(pair / f"acts/{m}_s1_test.h5")[0] for m in ("qwen_tiny", "granite_tiny")]
    assert set(tests[0]["prompt"]) == set(range(cfg["n_test"]))
    scores = map_scores(maps, *tests, *spans)
    got = fit[(fit["seed"] == 1) & (fit["receiver"] == "qwen_tiny")].set_index("map")["r2_test"]
    assert got.to_dict() == pytest.approx(scores, abs=1e-6)
    contents = pd.read_csv(pair / "query_content.tsv", sep="\t")
    got = contents[(contents["seed"] == 1) & (contents["model"] == "qwen_tiny")].set_index("content")["r2_test"]
    assert got.to_dict() == pytest.approx(query_content(recv, tests[0], spans[0]["address"], cfg["lambdas"]), abs=1e-6)
    assert (run1 / "results/figures/stitch_qwen_tiny--granite_tiny.pdf").read_bytes()[:4] == b"%PDF"


def test_hla_length_table(run1):
    cfg = yaml.safe_load((run1 / "tests/config/config.yaml").read_text())["hla"]
    rows = pd.concat(
        [
            pd.read_csv(run1 / f"results/hla/scratch/{m}_s{s}/eval.csv")
            for m in ("gdn", "fixed", "hla")
            for s in cfg["seeds"]
        ]
    )
    table = pd.read_csv(run1 / "results/tables/hla_length.tsv", sep="\t")
    lengths = [cfg["train_length"] * m for m in cfg["length_multipliers"]]
    assert sorted(table["length"].unique()) == lengths and set(table["mode"]) == {"gdn", "fixed", "hla"}
    for _, r in table[table["task"] != "macro"].iterrows():
        g = rows[(rows["mode"] == r["mode"]) & (rows["task"] == r["task"]) & (rows["length"] == r["length"])]
        assert r["accuracy"] == pytest.approx(g["correct"].sum() / g["answers"].sum())
        assert r["lo"] <= r["accuracy"] <= r["hi"]
    macro = table[table["task"] == "macro"].set_index(["mode", "length"])["accuracy"]
    per_task = table[table["task"] != "macro"].groupby(["mode", "length"])["accuracy"].mean()
    pd.testing.assert_series_equal(macro.sort_index(), per_task.sort_index(), check_names=False)
    # Adaptation: the same items before conversion, right after it and after fine-tuning.
    adapt = pd.read_csv(run1 / "results/hla/adapt/qwen_tiny/eval.csv")
    phases = {p: g.set_index(["task", "length"])["answers"] for p, g in adapt.groupby("phase")}
    assert set(phases) == {"before", "gdn_finetuned", "fixed_finetuned", "converted", "after"}
    assert phases["before"].equals(phases["converted"]) and phases["before"].equals(phases["after"])
    routers = adapt.groupby("phase")["router"].first().fillna("")
    assert routers["after"] == routers["converted"] == cfg.get("router", "paper") and routers["before"] == ""
    assert len(pd.read_csv(run1 / "results/hla/adapt/qwen_tiny/curve.csv")) == 2
    longbench = pd.read_csv(run1 / "results/hla/adapt/qwen_tiny/longbench.csv")  # no local copy configured
    assert longbench.empty and "pred" in longbench.columns
    ruler = pd.read_csv(run1 / "results/hla/adapt/qwen_tiny/ruler.csv")  # the toys keep their short suite
    assert ruler.empty and "score" in ruler.columns


def test_noop_rerun_does_nothing(run1):
    res = snakemake(run1, "-n")
    assert res.returncode == 0 and "Nothing to be done" in res.stdout + res.stderr


def test_reordering_config_keys_reruns_nothing(run1):
    cfg = yaml.safe_load((run1 / "tests/config/config.yaml").read_text())
    flip = lambda d: dict(reversed(d.items()))  # noqa: E731
    for model in cfg["models"].values():
        model["source"]["toy"] = flip(model["source"]["toy"])
    for section in ("zoo", "extract"):
        cfg[section] = flip(cfg[section])
    cfg["tasks"] = {name: flip(task) for name, task in cfg["tasks"].items()}
    (run1 / "reordered.yaml").write_text(yaml.safe_dump(cfg, sort_keys=False))
    res = subprocess.run(
        [SNAKEMAKE, "--cores", "2", "--configfile", "reordered.yaml", "-n"], cwd=run1, capture_output=True, text=True
    )
    assert res.returncode == 0 and "Nothing to be done" in res.stdout + res.stderr, res.stdout[-2000:]


@pytest.mark.parametrize(
    "edit, key",
    [
        ("models.qwen_tiny.family: mamba9", "family"),
        ("zoo.gate: 2", "gate"),
        ("models.qwen_tiny.source.toy.layout: LLXA", "layout"),
        ("models.qwen_tiny.source.toy.layout: LLPA", "layout"),  # P is not a Qwen3.5 layer
        ("stitch.pairs: [[qwen_tiny, nomodel]]", "pairs"),
    ],
)
def test_bad_config_is_refused_before_any_job(tmp_path, edit, key):
    cwd = workdir(tmp_path)
    cfg = yaml.safe_load((cwd / "tests/config/config.yaml").read_text())
    path, value = edit.split(": ")
    node = cfg
    *parents, last = path.split(".")
    for p in parents:
        node = node[p]
    node[last] = yaml.safe_load(value)
    (cwd / "tests/config/config.yaml").write_text(yaml.safe_dump(cfg))
    res = snakemake(cwd, "-n")
    assert res.returncode != 0
    out = res.stdout + res.stderr
    assert f"config {path}: " in out and key in path
    assert not (cwd / "results/models").exists()


def test_paper_preset_dry_runs_every_experiment_with_pair_resources(tmp_path):
    cwd = workdir(tmp_path)
    cmd = [SNAKEMAKE, "-n", "--cores", "2", "--configfile", "config/presets/paper.yaml", "--workflow-profile"]
    res = subprocess.run([*cmd, "profiles/slurm"], cwd=cwd, capture_output=True, text=True)
    out = res.stdout + res.stderr
    assert res.returncode == 0, out[-2000:]
    counts = dict(re.findall(r"^(\w+)\s+(\d+)$", out, re.M))
    assert counts["stitch_acts"] == counts["stitch_fit"] == "3" and counts["stitch_swap"] == "6"
    assert counts["scale"] == "6" and counts["plot_stitch"] == "1"
    # A stitching job holds both models: their host memory adds up (8000 + 21000 MB).
    swap = out[out.index("rule stitch_swap:") :].split("\n\n")[0]
    assert "mem_mb=29000" in swap and "gpu=1" in swap


def study_jobs(tmp_path, study):
    """Job counts per rule in a dry run of the full workflow on a study's config."""
    cmd = [SNAKEMAKE, "-n", "--cores", "2", "--configfile", f"studies/{study}/config.yaml"]
    res = subprocess.run(cmd, cwd=workdir(tmp_path), capture_output=True, text=True)
    out = res.stdout + res.stderr
    assert res.returncode == 0, out[-2000:]
    counts = dict(re.findall(r"^(\w+)\s+(\d+)$", out, re.M))
    assert counts["findings"] == "1", "a study's run writes its findings.md"
    return counts


def test_science_study_trains_its_toys_and_runs_only_their_experiments(tmp_path):
    counts = study_jobs(tmp_path, "one-toy-per-phenomenon")
    assert counts["train_toy"] == counts["circuit"] == counts["split_prefill"] == "5"
    assert counts["stitch_swap"] == "6" and counts["scale"] == "1" and "hla_adapt" not in counts
    assert "hla_train" not in counts and "hla_scratch" not in counts  # the default run's, shipped


def test_notes_study_trains_its_toy_and_runs_only_split_prefill_and_the_circuit_on_it(tmp_path):
    counts = study_jobs(tmp_path, "retrieval-past-notes")
    assert counts["train_toy"] == counts["circuit"] == counts["split_prefill"] == "1"
    assert "scale" not in counts and "stitch_swap" not in counts and "hla_scratch" not in counts


def test_redraw_study_trains_the_notes_studys_toy_before_the_four_that_continue_it(tmp_path):
    counts = study_jobs(tmp_path / "all", "redrawn-reader")
    assert counts["train_toy"] == "5" and counts["circuit"] == counts["split_prefill"] == "4"
    assert "scale" not in counts and "stitch_swap" not in counts and "hla_scratch" not in counts
    target = "results/models/qwen_redraw_s2/eval.json"
    res = snakemake(workdir(tmp_path / "one"), "-n", target, configfile="studies/redrawn-reader/config.yaml")
    jobs = re.findall(r"rule (\w+):\n((?:    .*\n)*?)    wildcards: model=(\w+)", res.stdout)
    assert sorted((rule, model) for rule, _, model in jobs) == [
        ("evaluate_toy", "qwen_redraw_s2"),
        ("train_toy", "qwen_notes"),
        ("train_toy", "qwen_redraw_s2"),
    ]
    inputs = {model: body for rule, body, model in jobs if rule == "train_toy"}
    assert "input: results/models/qwen_notes/model.safetensors" in inputs["qwen_redraw_s2"]
    assert "input:" not in inputs["qwen_notes"]


def test_a_from_toy_retrains_on_new_parent_weights_and_not_on_a_new_evaluation_of_them(tmp_path):
    """Only by modification times (the files stand in for trained ones): a gate changed on the parent re-evaluates
    it, and that must not cost the continuation its training."""
    cwd = workdir(tmp_path)
    cfg = yaml.safe_load((cwd / "tests/config/config.yaml").read_text())
    child = {"hidden_size": 16, "layout": "LLA", "heads": 2, "from": "qwen_tiny_s", "steps": 5}
    cfg["models"]["child"] = {"family": "qwen3_5", "source": {"toy": child}}
    (cwd / "tests/config/config.yaml").write_text(yaml.safe_dump(cfg, sort_keys=False))
    for age, model in ((600, "qwen_tiny_s"), (300, "child")):
        for name in ("config.json", "model.safetensors", "tokenizer.json", "curve.csv", "eval.json"):
            path = cwd / "results/models" / model / name
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text("stand-in")
            stamp = time.time() - age + (60 if name == "eval.json" else 0)
            os.utime(path, (stamp, stamp))

    def retrained():
        res = snakemake(cwd, "-n", "--rerun-triggers", "mtime", "--", "results/models/child/eval.json")
        assert res.returncode == 0, (res.stdout + res.stderr)[-2000:]
        return re.findall(r"rule train_toy:\n(?:    .*\n)*?    wildcards: model=(\w+)", res.stdout)

    assert retrained() == []
    os.utime(cwd / "results/models/qwen_tiny_s/eval.json")
    assert retrained() == []
    os.utime(cwd / "results/models/qwen_tiny_s/model.safetensors")
    assert retrained() == ["child"]


def test_a_shipped_from_toy_is_its_parents_weights_trained_on_and_ships_the_parents_spec(tmp_path):
    cwd = workdir(tmp_path)
    cfg = yaml.safe_load((cwd / "tests/config/config.yaml").read_text())
    child = {"hidden_size": 16, "layout": "LLA", "heads": 2, "seed": 4, "from": "qwen_tiny_s", "steps": 5}
    cfg["models"]["child"] = {"family": "qwen3_5", "source": {"toy": child | {"redraw": [2]}}}
    (cwd / "tests/config/config.yaml").write_text(yaml.safe_dump(cfg, sort_keys=False))
    res = snakemake(cwd, "--", "zoo/child/manifest.json")
    assert res.returncode == 0, (res.stdout + res.stderr)[-2000:]
    training = json.loads((cwd / "zoo/child/training.json").read_text())
    assert training["toy"]["from"] == "qwen_tiny_s" and training["parent"]["toy"]["steps"] == 10
    # The job's weights are what train_and_save makes of the parent's, as the library's tests hold it to.
    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # as the job ran
    try:
        train_and_save("qwen3_5", training["toy"], training["zoo"], tmp_path / "again", False, cwd / PARENT_DIR)
    finally:
        torch.set_num_threads(threads)
    again, shipped = load_model(tmp_path / "again").model, load_model(cwd / "zoo/child").model
    for (name, p), q in zip(again.named_parameters(), shipped.parameters(), strict=True):
        assert torch.equal(p, q), name


PARENT_DIR = "results/models/qwen_tiny_s"


def test_hop_study_trains_its_toy_and_runs_only_its_experiments(tmp_path):
    counts = study_jobs(tmp_path, "two-hop-lookup")
    assert counts["train_toy"] == counts["circuit"] == counts["split_prefill"] == counts["scale"] == "1"
    assert "stitch_swap" not in counts and "hla_train" not in counts and "hla_scratch" not in counts


@pytest.mark.parametrize("study, toys", [("chained-readers", "3"), ("group-dropout", "6")])
def test_a_sweep_study_trains_its_toys_and_runs_only_their_experiments(tmp_path, study, toys):
    counts = study_jobs(tmp_path, study)
    assert counts["train_toy"] == counts["circuit"] == counts["split_prefill"] == counts["scale"] == toys
    assert "stitch_swap" not in counts and "hla_train" not in counts and "hla_scratch" not in counts


@pytest.mark.parametrize("study", ["language-in-the-state", "fused-persona"])
def test_a_style_study_trains_its_toy_and_runs_only_its_experiments(tmp_path, study):
    counts = study_jobs(tmp_path, study)
    assert counts["train_toy"] == counts["circuit"] == counts["split_prefill"] == "1"
    assert "scale" not in counts and "stitch_swap" not in counts and "hla_train" not in counts


def test_toys_that_more_experiments_wait_on_train_first(tmp_path):
    """In the test config qwen_tiny feeds six experiments, granite_tiny four, falcon_tiny three, nemotron_tiny and
    next_tiny two, qwen_tiny_s one: a toy that finishes late holds up the most jobs behind it, so it trains first."""
    cwd = workdir(tmp_path)
    res = snakemake(cwd, "-n")
    assert res.returncode == 0, (res.stdout + res.stderr)[-2000:]
    jobs = re.findall(
        r"rule (train_toy|evaluate_toy):\n(?:    .*\n)*?    wildcards: model=(\w+)\n    priority: (\d+)", res.stdout
    )
    priority = {(rule, model): int(p) for rule, model, p in jobs}
    assert {m for r, m in priority if r == "train_toy"} == {*MODELS, *FAMILY_TOYS, "qwen_tiny_s"}
    for rule in ("train_toy", "evaluate_toy"):
        assert priority[rule, "qwen_tiny"] == 16 and priority[rule, "granite_tiny"] == 14
        assert priority[rule, "falcon_tiny"] == 13 and priority[rule, "qwen_tiny_s"] == 11
        assert priority[rule, "nemotron_tiny"] == priority[rule, "next_tiny"] == 12


def test_the_default_config_loads_the_shipped_zoo_and_trains_nothing(tmp_path):
    cwd = workdir(tmp_path)
    res = subprocess.run([SNAKEMAKE, "-n", "--cores", "2"], cwd=cwd, capture_output=True, text=True)
    out = res.stdout + res.stderr
    assert res.returncode == 0, out[-2000:]
    jobs = dict(re.findall(r"^(\w+)\s+(\d+)$", out, re.M))
    assert "train_toy" not in jobs and "evaluate_toy" not in jobs and jobs["plot_zoo"] == "1"
    assert "hla_train" not in jobs and jobs["hla_scratch"] == "9"  # the from-scratch HLA models too
    cfg = yaml.safe_load((cwd / "config/config.yaml").read_text())
    for name, entry in cfg["models"].items():  # each a shipped checkpoint whose manifest its jobs read
        assert entry["source"] == f"zoo/{name}" and (cwd / entry["source"] / "manifest.json").is_file()
    circuit = out[out.index("rule circuit:") :].split("\n\n")[0]
    assert re.search(r"input: zoo/\w+/manifest.json", circuit)
    hla = out[out.index("rule hla_scratch:") :].split("\n\n")[0]
    assert re.search(r"input: zoo/hla/\w+_s\d/manifest.json", hla)


def test_a_checkpoint_without_a_chat_template_is_announced_once_before_any_job(run1, tmp_path):
    cwd = tmp_path / "copy"
    shutil.copytree(run1, cwd)
    path = cwd / "tests/config/config.yaml"
    cfg = yaml.safe_load(path.read_text())
    cfg["models"]["plain"] = {"family": "qwen3_5", "source": "results/models/qwen_tiny"}  # no manifest, no template
    path.write_text(yaml.safe_dump(cfg, sort_keys=False))
    res = snakemake(cwd, "-n")
    out = res.stdout + res.stderr
    note = "hybridlens: config models.plain: results/models/qwen_tiny has no chat template, so its prompts are read"
    assert res.returncode == 0 and [s for s in out.splitlines() if "chat template" in s] == [
        note + " as plain text, unframed; set prompts: raw in its entry if that is intended"
    ], out[-2000:]
    assert note in res.stderr  # said while the workflow parses, before any job is planned or run
    cfg["models"]["plain"]["prompts"] = "raw"  # the user's explicit choice: no note
    path.write_text(yaml.safe_dump(cfg, sort_keys=False))
    res = snakemake(cwd, "-n")
    assert res.returncode == 0 and "chat template" not in res.stdout + res.stderr


def test_a_shipped_toy_carries_its_manifest_and_a_changed_file_is_refused(run1, tmp_path):
    cwd = tmp_path / "copy"
    shutil.copytree(run1, cwd)
    res = snakemake(cwd, "--", "zoo/qwen_tiny/manifest.json")
    assert res.returncode == 0, res.stderr[-2000:]
    jobs = dict(re.findall(r"^(\w+)\s+(\d+)$", res.stdout + res.stderr, re.M))
    assert jobs.get("ship_toy") == "1" and "train_toy" not in jobs  # shipping reuses the trained toy
    zoo, trained = cwd / "zoo/qwen_tiny", cwd / "results/models/qwen_tiny"
    manifest = json.loads((zoo / "manifest.json").read_text())
    assert {"config.json", "model.safetensors", "tokenizer.json", "curve.csv", "eval.json"} <= set(manifest["files"])
    assert {"training.json", "trained_on.json"} <= set(manifest["files"])
    for name, digest in manifest["files"].items():
        assert (zoo / name).read_bytes() == (trained / name).read_bytes()
        assert hashlib.sha256((zoo / name).read_bytes()).hexdigest() == digest
    assert manifest["versions"]["torch"] == torch.__version__ and manifest["commit"] == "unknown"  # not a git checkout
    cfg = yaml.safe_load((cwd / "tests/config/config.yaml").read_text())
    training = json.loads((zoo / "training.json").read_text())
    assert training["toy"] == cfg["models"]["qwen_tiny"]["source"]["toy"] and training["family"] == "qwen3_5"
    trained_on = json.loads((zoo / "trained_on.json").read_text())
    curve = pd.read_csv(zoo / "curve.csv")
    assert trained_on["threads"] == 1 and trained_on["steps"] == curve["step"].iloc[-1] + 1
    assert trained_on["torch_cpu_capability"] == torch.backends.cpu.get_cpu_capability()
    ids = torch.tensor([[3, 5, 7, 11]])
    with torch.no_grad():
        a, b = (load_model(d).model(ids).logits for d in (zoo, trained))
    assert torch.equal(a, b)
    # As a registry entry it is a local checkpoint; one byte changed in place is refused when the workflow parses.
    cfg["models"]["shipped"] = {"family": "qwen3_5", "source": "zoo/qwen_tiny"}
    (cwd / "tests/config/config.yaml").write_text(yaml.safe_dump(cfg, sort_keys=False))
    assert snakemake(cwd, "-n").returncode == 0
    weights = zoo / "model.safetensors"
    raw = bytearray(weights.read_bytes())
    raw[len(raw) // 2] ^= 0x01
    weights.write_bytes(bytes(raw))
    res = snakemake(cwd, "-n")
    out = res.stdout + res.stderr
    message = "zoo/qwen_tiny/model.safetensors differs from the sha256 in its manifest: changed since it was made"
    assert res.returncode != 0 and f"config models.shipped.source: {message}" in out, out[-2000:]
    with pytest.raises(SourceError, match=re.escape(message)):
        load_model(zoo)
    # A file the manifest does not list would change results just as silently: transformers reads a chat
    # template from chat_template.jinja. The manifest covers the directory.
    raw[len(raw) // 2] ^= 0x01
    weights.write_bytes(bytes(raw))
    (zoo / "chat_template.jinja").write_text("{{ '<|user|> ' + messages[0]['content'] }}")
    res = snakemake(cwd, "-n")
    out = res.stdout + res.stderr
    message = "zoo/qwen_tiny/chat_template.jinja is not in its manifest: a file added to a shipped directory"
    assert res.returncode != 0 and f"config models.shipped.source: {message}" in out, out[-2000:]


def test_a_shipped_hla_model_evaluates_as_the_one_trained_in_the_run(run1, tmp_path):
    cwd = tmp_path / "copy"
    shutil.copytree(run1, cwd)
    res = snakemake(cwd, "--", "zoo/hla/hla_s1/manifest.json")
    jobs = dict(re.findall(r"^(\w+)\s+(\d+)$", res.stdout + res.stderr, re.M))
    assert res.returncode == 0 and jobs.get("ship_hla") == "1" and "hla_train" not in jobs, res.stderr[-2000:]
    manifest = json.loads((cwd / "zoo/hla/hla_s1/manifest.json").read_text())
    assert set(manifest["files"]) == {"model.safetensors", "curve.csv", "training.json", "trained_on.json"}
    cfg = yaml.safe_load((cwd / "tests/config/config.yaml").read_text())
    assert json.loads((cwd / "zoo/hla/hla_s1/training.json").read_text())["hidden"] == cfg["hla"]["hidden"]
    # Evaluated from zoo/hla instead of the run's own model: the same table, and nothing trained.
    cfg["hla"] |= {"source": "zoo/hla", "modes": ["hla"], "seeds": [1]}
    (cwd / "tests/config/config.yaml").write_text(yaml.safe_dump(cfg, sort_keys=False))
    table = "results/hla/scratch/hla_s1/eval.csv"
    before = (cwd / table).read_bytes()
    res = snakemake(cwd, "--forcerun", "hla_scratch", "--", table)
    jobs = dict(re.findall(r"^(\w+)\s+(\d+)$", res.stdout + res.stderr, re.M))
    assert res.returncode == 0 and jobs.get("hla_scratch") == "1" and "hla_train" not in jobs, res.stderr[-2000:]
    assert (cwd / table).read_bytes() == before
    # A config that trains another model than the shipped one is refused in one line; so is a missing seed.
    cfg["hla"]["hidden"] += 8
    (cwd / "tests/config/config.yaml").write_text(yaml.safe_dump(cfg, sort_keys=False))
    res = snakemake(cwd, "--forcerun", "hla_scratch", "--", table)
    hidden = cfg["hla"]["hidden"]
    assert res.returncode != 0
    assert f"zoo/hla/hla_s1 was trained with hidden={hidden - 8} (config: {hidden}); retrain it" in res.stderr
    cfg["hla"] |= {"hidden": hidden - 8, "seeds": [1, 7]}
    (cwd / "tests/config/config.yaml").write_text(yaml.safe_dump(cfg, sort_keys=False))
    res = snakemake(cwd, "-n")
    assert res.returncode != 0 and "config hla.source: zoo/hla has no shipped model hla_s7" in res.stdout + res.stderr


def test_the_summary_page_quotes_each_experiments_table(run1):
    page = (run1 / "results/summary.md").read_text()
    headings = re.findall(r"^## (.+)$", page, re.M)
    assert [h.split(":")[0] for h in headings] == [
        "Models",
        "Toy zoo",
        "Encode–Address circuit",
        "Built-in validations",
        "Split-prefill",
        "Scale sweep",
        "Stitching",
        "Stitching",
        "HLA",
        "HLA router",
        "HLA adaptation",
    ]
    gates = pd.read_csv(run1 / "results/tables/hla_gates.tsv", sep="\t").query("mode == 'hla' and length == 64")
    cell = " / ".join(f"{gates.set_index('chunk').loc[c, 'gate']:.3f}" for c in ("asked", "pairs", "filler"))
    row = next(line for line in page.splitlines() if line.startswith("| hla seed 1 | 0 |"))
    assert row.strip("| ").split(" | ")[-1] == cell, row
    hla = pd.read_csv(run1 / "results/tables/hla_length.tsv", sep="\t").query("task == 'mqar' and mode == 'gdn'")
    row = next(line for line in page.splitlines() if line.startswith("| gdn | mqar |"))
    cells = [f"{r.accuracy:.3f} [{r.lo:.3f}, {r.hi:.3f}]" for r in hla.sort_values("length").itertuples()]
    assert row.strip("| ").split(" | ")[2:] == cells, row
    circuit = pd.read_csv(run1 / "results/tables/circuit_transplant.tsv", sep="\t")
    section = page.split("## Encode–Address circuit")[1].split("## ")[0]
    for model in MODELS:
        r = circuit.query("model == @model and kind == 'query' and block == 'address' and donor == 'same_dict'")
        r = r[r["positions"] == "final"]
        # An untrained tiny toy may have no Address block: no row, and the page says so with a dash.
        cell = (
            "–"
            if r.empty
            else f"{r.iloc[0]['redirect']:.3f} [{r.iloc[0]['redirect_lo']:.3f}, {r.iloc[0]['redirect_hi']:.3f}]"
        )
        row = next(line for line in section.splitlines() if line.startswith(f"| {model} |"))
        assert row.split(" | ")[2] == cell, row
    checks = pd.read_csv(run1 / "results/tables/circuit_validations.tsv", sep="\t")
    section = page.split("## Built-in validations")[1].split("## ")[0]
    circuits = {m: json.loads((run1 / f"results/circuit/{m}/circuit.json").read_text()) for m in MODELS + FAMILY_TOYS}
    transplanted = [m for m, c in circuits.items() if c["address"]["group"] is not None]  # the others check nothing
    assert sorted(set(checks["model"])) == sorted(transplanted) and len(checks) == 3 * len(transplanted)
    for r in checks.itertuples():  # the identity transplants exact, the shortcut within its tolerance
        row = next(line for line in section.splitlines() if line.startswith(f"| {r.model} | {r.name} |"))
        assert row.strip("| ").split(" | ")[2:] == [f"{r.ulps:.3g}", f"{r.allowed_ulps:.4g}", "float32", "passed"]
        assert r.ulps == 0 if r.name.startswith("identity") else r.ulps <= r.allowed_ulps
    retention = pd.read_csv(run1 / "results/tables/split_prefill_retention.tsv", sep="\t")
    section = page.split("## Split-prefill")[1].split("## ")[0]
    cues = retention.query("condition == 'cues_kv_neutral'").dropna(subset=["retention_lo", "retention_hi"])
    assert len(cues) > 0
    for r in cues.itertuples():
        row = next(line for line in section.splitlines() if line.startswith(f"| {r.model} | {r.property} |"))
        assert row.strip("| ").split(" | ")[-1] == f"{r.retention:.3f} [{r.retention_lo:.3f}, {r.retention_hi:.3f}]"
    contents = pd.read_csv(run1 / "results/stitch/qwen_tiny--granite_tiny/query_content.tsv", sep="\t")
    section = page.split("## Stitching: what each model's")[1].split("## ")[0]
    for model, g in contents.groupby("model"):
        cells = [
            " / ".join(f"{v:.2f}" for v in g.query("content == @c").sort_values("seed")["r2_test"])
            for c in ("key", "answer")
        ]
        assert f"| {model} | {cells[0]} | {cells[1]} |" in section, section
    sizes = pd.read_csv(run1 / "results/scale/sizes.tsv", sep="\t")
    for _, r in sizes.iterrows():
        assert f"| {r['model']} | {r['parameters']} | {r['verdict']} | {r['groups_needed']} |" in page


def test_a_jsonl_task_is_extracted_and_transplanted_and_a_broken_line_is_refused_before_any_job(run1, tmp_path):
    cwd = tmp_path / "copy"
    shutil.copytree(run1, cwd)
    cfg = yaml.safe_load((cwd / "tests/config/config.yaml").read_text())
    cfg["tasks"]["mine"] = {"file": "config/tasks/example.jsonl"}
    cfg["extract"]["tasks"] = ["chat4", "mine"]
    cfg["circuit"]["tasks"] = ["mine"]
    (cwd / "tests/config/config.yaml").write_text(yaml.safe_dump(cfg, sort_keys=False))
    res = snakemake(cwd, "--", "results/tables/logit_lens_mine.tsv", "results/summary.md")
    jobs = dict(re.findall(r"^(\w+)\s+(\d+)$", res.stdout + res.stderr, re.M))
    assert res.returncode == 0 and jobs.get("extract_activations") == "3", res.stderr[-2000:]
    assert jobs.get("circuit_task") == str(len(cfg["circuit"]["models"]))
    assert "train_toy" not in jobs and "circuit" not in jobs  # the models and their circuits stay as they are
    table = pd.read_csv(cwd / "results/tables/circuit_task_mine.tsv", sep="\t", keep_default_na=False)
    assert set(table["model"]) == set(cfg["circuit"]["models"]) and (table["n"] == 4).all()
    assert {"final", "query"} <= set(table[table["kind"] == "query"]["positions"])
    section = (cwd / "results/summary.md").read_text().split("## Circuit on your own items")[1].split("## ")[0]
    for model in cfg["circuit"]["models"]:
        r = table.query("model == @model and kind == 'state' and block == 'address'")
        row = next(line for line in section.splitlines() if line.startswith(f"| {model} | mine | 4 |"))
        cell = "–" if r.empty else f"{r.iloc[0]['answers_donor']:.3f} [{r.iloc[0]['answers_donor_lo']:.3f}, "
        assert row.split(" | ")[-1].startswith(cell), row
    data, _ = read_store(cwd / "results/activations/qwen_tiny/mine.h5")
    hm = load_model(cwd / "results/models/qwen_tiny")
    answers = ["ice", "wine", "honey", "sand"]
    assert data["answer_ids"].tolist() == hm.tokenizer.convert_tokens_to_ids(answers)
    assert data["layers.0.resid_pre"].shape == (4, 1, hm.d_model)
    assert data["input_ids"].shape == (4, data["lengths"].max()) and len(set(data["lengths"])) == 4
    lens = pd.read_csv(cwd / "results/activations/qwen_tiny/mine.lens.tsv", sep="\t")
    assert sorted(lens["prompt"].unique()) == [0, 1, 2, 3] and len(lens) == 4 * hm.n_layers
    # A line without its answer is named, with its field, when the workflow parses: no job starts.
    example = cwd / "config/tasks/example.jsonl"
    lines = example.read_text()
    example.write_text(lines + '{"prompt": "Question : What is the value of apple ?"}\n')
    res = snakemake(cwd, "-n")
    out = res.stdout + res.stderr
    assert res.returncode != 0, out[-2000:]
    assert "config/tasks/example.jsonl:5: field 'answer' is missing or empty" in out
    # So is a line without the donor the circuit's transplant needs, while the circuit reads the task.
    example.write_text(lines + '{"prompt": "Question : What is the value of apple ?", "answer": "fire"}\n')
    res = snakemake(cwd, "-n")
    out = res.stdout + res.stderr
    assert res.returncode != 0 and "example.jsonl:5: field 'donor' is missing; circuit.tasks needs it" in out


def test_split_prefill_runs_on_a_users_items_and_refuses_a_line_without_a_swap(run1, tmp_path):
    cwd = tmp_path / "copy"
    shutil.copytree(run1, cwd)
    cfg = yaml.safe_load((cwd / "tests/config/config.yaml").read_text())
    cfg["tasks"]["mine"] = {"file": "config/tasks/split_example.jsonl"}
    cfg["split_prefill"] |= {"task": "mine", "models": ["qwen_tiny", "falcon_tiny"]}
    (cwd / "tests/config/config.yaml").write_text(yaml.safe_dump(cfg, sort_keys=False))
    res = snakemake(cwd, "--", "results/tables/split_prefill_retention.tsv", "results/tables/state_swap.tsv")
    jobs = dict(re.findall(r"^(\w+)\s+(\d+)$", res.stdout + res.stderr, re.M))
    assert res.returncode == 0 and jobs.get("split_prefill") == "2", res.stderr[-2000:]
    for model in ("qwen_tiny", "falcon_tiny"):
        rows = pd.read_csv(cwd / f"results/split_prefill/{model}/items.tsv", sep="\t", keep_default_na=False)
        assert len(rows) == 3 * (len(CONDITIONS) + 1) and set(rows["seed"]) == {cfg["split_prefill"]["seeds"][0]}
        assert list(dict.fromkeys(rows["language_of_a"])) == ["fr", "es", "en"]
        assert list(dict.fromkeys(rows["expected"])) == ["tulipes", "Viena", "vanilla"]
    example = cwd / "config/tasks/split_example.jsonl"
    example.write_text(example.read_text() + '{"prompt": "[[question:What?]]", "answer": "x"}\n')
    res = snakemake(cwd, "-n")
    out = res.stdout + res.stderr
    assert (
        res.returncode != 0
        and "split_example.jsonl:4: field 'swap' is missing; split_prefill.task needs it on every line" in out
    )


SCALE_LINES = [
    {
        "prompt": f"Dictionary : [[key0:{a}]] = [[value0:{x}]] , [[key1:{b}]] = [[value1:{y}]] . "
        f"Question : What is the value of [[query:{b}]] ?",
        "answer": y,
        "lead": " ",
        "choices": [x, y],
        "donor": {
            "prompt": f"Dictionary : [[key0:{a}]] = [[value0:{x}]] , [[key1:{b}]] = [[value1:{y}]] . "
            f"Question : What is the value of [[query:{a}]] ?",
            "answer": x,
            "lead": " ",
        },
    }
    for a, b, x, y in [
        ("apple", "grape", "fire", "ice"),
        ("whale", "otter", "salt", "wine"),
        ("drum", "harp", "silk", "honey"),
    ]
]


def test_the_scale_sweep_runs_on_a_users_items_and_refuses_one_without_its_entries(run1, tmp_path):
    cwd = tmp_path / "copy"
    shutil.copytree(run1, cwd)
    path = cwd / "config/tasks/mine.jsonl"
    path.write_text("".join(json.dumps(line) + "\n" for line in SCALE_LINES))
    cfg = yaml.safe_load((cwd / "tests/config/config.yaml").read_text())
    cfg["tasks"]["mine"] = {"file": "config/tasks/mine.jsonl"}
    cfg["scale"] |= {"task": "mine", "models": ["qwen_tiny"]}
    (cwd / "tests/config/config.yaml").write_text(yaml.safe_dump(cfg, sort_keys=False))
    res = snakemake(cwd, "--", "results/scale/qwen_tiny/summary.json")
    jobs = dict(re.findall(r"^(\w+)\s+(\d+)$", res.stdout + res.stderr, re.M))
    assert res.returncode == 0 and jobs.get("scale") == "1", res.stderr[-2000:]
    rows = pd.read_csv(cwd / "results/scale/qwen_tiny/transplant.csv")
    assert set(rows["n"]) == {len(SCALE_LINES)}  # every group set over the user's three items
    # A line whose donor's answer is not among its choices is named when the workflow parses.
    broken = dict(SCALE_LINES[0], choices=["ice", "gold"])
    path.write_text(path.read_text() + json.dumps(broken) + "\n")
    res = snakemake(cwd, "-n")
    out = res.stdout + res.stderr
    assert res.returncode != 0 and "mine.jsonl:4: the donor's answer 'fire' is not among the choices" in out


@pytest.mark.slow
@pytest.mark.skipif(not os.environ.get("HYBRIDLENS_SLOW"), reason="a whole study's run (minutes): HYBRIDLENS_SLOW=1")
def test_the_language_study_trains_its_toy_and_writes_its_findings_from_its_tables(tmp_path):
    """The study under 15 minutes on two cores, run whole: training, the experiments, and findings.md."""
    cwd = workdir(tmp_path)
    res = snakemake(cwd, "--workflow-profile", "profiles/local", configfile="studies/language-in-the-state/config.yaml")
    assert res.returncode == 0, res.stderr[-3000:]
    findings = (cwd / "studies/language-in-the-state/findings.md").read_text()
    assert "{{" not in findings and len(re.findall(r"\d\.\d{3} \[\d\.\d{3}, \d\.\d{3}\]", findings)) >= 6
