"""Bad inputs and interrupted runs as a user meets them: one line that names the problem and the fix, a rule
log that says more, and nothing already written lost."""

import json
import os
import re
import shlex
import shutil
import subprocess
import sys
import time
from pathlib import Path

import h5py
import numpy as np
import pandas as pd
import pytest
import yaml
from safetensors.torch import load_file
from wf import REPO, SNAKEMAKE, snakemake, workdir

from hybridlens.models.realshape import REAL_CONFIGS, build_realshape
from hybridlens.runlock import holder
from hybridlens.store import read_store

CONFIG = "tests/config/config.yaml"
FAULTS = str(Path(__file__).parent / "faults")
PAIR = "results/stitch/qwen_tiny--granite_tiny"


def edit_config(cwd, change):
    cfg = yaml.safe_load((cwd / CONFIG).read_text())
    change(cfg)
    (cwd / CONFIG).write_text(yaml.safe_dump(cfg, sort_keys=False))


@pytest.fixture(scope="module")
def checkpoint(tmp_path_factory):
    """A real-structure sharded checkpoint (Qwen3.5-0.8B's layout, scaled down), as one would download it."""
    out = tmp_path_factory.mktemp("downloaded")
    build_realshape(REAL_CONFIGS / "Qwen__Qwen3.5-0.8B.config.json", out, layers=4, hidden=64, dtype="float32")
    return out


def _drop_shard(ckpt):
    (ckpt / "model-00002-of-00003.safetensors").unlink()


def _bin_only(ckpt):
    for f in ckpt.glob("model*.safetensors*"):
        f.unlink()
    (ckpt / "pytorch_model.bin").write_bytes(b"weights")


def _truncate(ckpt):
    shard = ckpt / "model-00001-of-00003.safetensors"
    shard.write_bytes(shard.read_bytes()[:-1000])


@pytest.mark.parametrize(
    "breakage, source, family, line",
    [
        (_drop_shard, None, "qwen3_5", "1 of the 3 shards that model.safetensors.index.json lists are missing"),
        (_bin_only, None, "qwen3_5", "holds only pytorch_model*.bin weights; hybridlens loads safetensors, convert"),
        (_truncate, None, "qwen3_5", "model-00001-of-00003.safetensors is "),
        (None, None, "granitemoehybrid", "model_type 'qwen3_5' is family 'qwen3_5'; set family: qwen3_5"),
        (None, "config/mine", "qwen3_5", "'config/mine' is neither a local directory nor a hub id of the form"),
    ],
    ids=["missing-shard", "bin-only", "truncated", "wrong-family", "relative-path"],
)
def test_a_broken_source_is_refused_before_any_toy_trains(tmp_path, checkpoint, breakage, source, family, line):
    cwd = workdir(tmp_path / "wf")
    ckpt = shutil.copytree(checkpoint, tmp_path / "ckpt")
    if breakage:
        breakage(ckpt)
    edit_config(cwd, lambda c: c["models"].update(mine={"family": family, "source": source or str(ckpt)}))
    res = snakemake(cwd, "--workflow-profile", "profiles/local")  # a real run: it must stop before training
    out = res.stdout + res.stderr
    assert res.returncode != 0 and line in out, out[-2000:]
    assert "config models.mine" in out.split(line)[0].splitlines()[-1]  # the line names the registry entry
    assert not (cwd / "results/models").exists()


def test_a_hub_id_that_cannot_be_checked_is_a_note_and_the_run_goes_on(tmp_path):
    cwd = workdir(tmp_path)
    edit_config(cwd, lambda c: c["models"].update(mine={"family": "qwen3_5", "source": "Qwen/Qwen3.5-0.8B"}))
    res = snakemake(cwd, "-n", env={**os.environ, "HF_HUB_OFFLINE": "1"})
    assert res.returncode == 0, res.stderr[-2000:]
    assert (
        "hybridlens: config models.mine.source: Qwen/Qwen3.5-0.8B is not a local directory; taken for a hub id, "
        "not checked (HF_HUB_OFFLINE is set)" in res.stderr
    )


def test_a_chain_toy_that_cannot_train_is_refused_before_any_job(tmp_path):
    cwd = workdir(tmp_path)
    toy = {"hidden_size": 16, "layout": "LALA", "formats": ["chat"], "chain": {"steps": 5, "freeze_below": 2}}
    edit_config(cwd, lambda c: c["models"].update(mine={"family": "qwen3_5", "source": {"toy": toy}}))
    res = snakemake(cwd, "-n")
    line = "config models.mine.source.toy.chain: a chain toy trains on hop prompts alone; set formats: [hop]"
    assert res.returncode != 0 and line in res.stdout + res.stderr, (res.stdout + res.stderr)[-2000:]


def test_a_toy_that_cannot_start_from_its_parent_is_refused_before_any_job(tmp_path):
    cwd = workdir(tmp_path)
    toy = {"hidden_size": 16, "layout": "LLA", "heads": 2, "from": "qwen_tiny", "redraw": [2]}
    edit_config(cwd, lambda c: c["models"].update(mine={"family": "qwen3_5", "source": {"toy": toy}}))
    res = snakemake(cwd, "-n")
    line = (
        "config models.mine.source.toy.hidden_size: 16 where qwen_tiny, whose weights it starts from, has 32; "
        "set it to qwen_tiny's"
    )
    assert res.returncode != 0 and line in res.stdout + res.stderr, (res.stdout + res.stderr)[-2000:]


def test_a_toy_analysed_in_a_format_it_was_not_trained_on_is_refused_before_any_job(tmp_path):
    cwd = workdir(tmp_path)
    toy = {"hidden_size": 16, "layout": "LLLA", "heads": 1, "formats": ["translate_fused"]}
    edit_config(cwd, lambda c: c["models"].update(fused={"family": "granitemoehybrid", "source": {"toy": toy}}))
    edit_config(cwd, lambda c: c["circuit"].update(models=["fused"]))
    res = snakemake(cwd, "-n")
    line = (
        "config circuit.format: fused was trained on translate_fused, not chat; set circuit.format to a format it "
        "was trained on, or list in circuit.models only models trained on chat"
    )
    assert res.returncode != 0 and line in res.stdout + res.stderr, (res.stdout + res.stderr)[-2000:]
    edit_config(cwd, lambda c: c["circuit"].update(format="translate_fused"))
    res = snakemake(cwd, "-n")
    assert res.returncode == 0, (res.stdout + res.stderr)[-2000:]


def dry_run(cwd, configfile):
    """snakemake -n with a --configfile, or with the default config/config.yaml."""
    if configfile:
        return snakemake(cwd, "-n")
    return subprocess.run([SNAKEMAKE, "-n", "--cores", "1"], cwd=cwd, capture_output=True, text=True)


@pytest.mark.parametrize("configfile", [True, False], ids=["configfile", "default-config"])
def test_a_duplicate_key_is_named_with_both_its_lines(tmp_path, configfile):
    cwd = workdir(tmp_path)
    path = cwd / (CONFIG if configfile else "config/config.yaml")
    text = path.read_text()
    first, second = text.splitlines().index("zoo:") + 1, len(text.splitlines()) + 1
    path.write_text(text + "zoo:\n  gate: 0.5\n")  # a second zoo block, as pasting part of a preset leaves
    res = dry_run(cwd, configfile)
    name = str(path) if configfile else "config/config.yaml"  # snakemake passes --configfile on as absolute
    assert res.returncode != 0
    assert (
        f"{name}:{second}: duplicate key 'zoo', first given at line {first}; the second would silently "
        in res.stdout + res.stderr
    )
    lines = text.splitlines()
    at = lines.index("zoo:") + 1  # and one inside a section
    path.write_text("\n".join([*lines[: at + 1], lines[at], *lines[at + 1 :]]) + "\n")
    res = dry_run(cwd, configfile)
    key = lines[at].split(":")[0].strip()
    assert f"{name}:{at + 2}: duplicate key '{key}', first given at line {at + 1}" in res.stdout + res.stderr


def test_a_yaml_syntax_error_is_named_by_file_line_and_column(tmp_path):
    cwd = workdir(tmp_path)
    default = cwd / "config/config.yaml"
    lines = default.read_text().splitlines()
    at = next(i for i, s in enumerate(lines) if s.startswith("  steps:"))
    lines[at] = lines[at].replace("steps: ", "steps: [", 1)
    default.write_text("\n".join(lines) + "\n")
    res = dry_run(cwd, configfile=False)
    assert res.returncode != 0
    out = res.stdout + res.stderr
    assert re.search(rf"config/config.yaml:{at + 2}:\d+: YAML syntax error: while parsing a flow sequence", out), out
    # A --configfile is read by snakemake before any workflow code: make run checks it first, with this command.
    preset = cwd / CONFIG
    preset.write_text(preset.read_text() + "tasks: {a: [1, 2}\n")
    res = subprocess.run([sys.executable, "-m", "hybridlens.config", str(preset)], capture_output=True, text=True)
    n = len(preset.read_text().splitlines())
    assert res.returncode == 1
    assert re.fullmatch(rf"hybridlens: {preset}:{n}:\d+: YAML syntax error: .*\n", res.stderr), res.stderr


def copy_run(run1, tmp_path):
    cwd = tmp_path / "copy"
    shutil.copytree(run1, cwd, symlinks=True)
    return cwd


def flip_a_byte(path):
    with h5py.File(path) as f:  # the first chunk of the largest dataset
        name = max(json.loads(f.attrs["dataset_names"]), key=lambda n: f[n.replace(".", "/")].size)
        offset = f[name.replace(".", "/")].id.get_chunk_info(0).byte_offset
    raw = bytearray(path.read_bytes())
    raw[offset + 3] ^= 0x40
    path.write_bytes(bytes(raw))


@pytest.mark.parametrize(
    "slot, replace_with, target, line",
    [
        (
            "acts/qwen_tiny_s1.h5",
            "acts/qwen_tiny_s2.h5",
            "maps_s1.h5",
            "written for seed=2, but this job expects seed=1",
        ),
        (
            "acts/qwen_tiny_s1.h5",
            "acts/granite_tiny_s1.h5",
            "maps_s1.h5",
            "written for model_source='results/models/granite_tiny', but this job expects "
            "model_source='results/models/qwen_tiny'",
        ),
        (
            "acts/granite_tiny_s2.h5",
            "results/activations/granite_tiny/chat4.h5",
            "maps_s2.h5",
            "written for kind='activations', but this job expects kind='stitch_acts'",
        ),
        ("maps_s1.h5", "maps_s2.h5", "items_granite_tiny_s1.csv", "written for seed=2, but this job expects seed=1"),
        ("acts/qwen_tiny_s1.h5", None, "maps_s1.h5", "does not match its checksum (corrupt)"),
    ],
    ids=["other-seed", "other-model", "extraction-store", "maps-of-other-seed", "corrupt-in-place"],
)
def test_a_store_written_for_something_else_is_refused_in_one_line(run1, tmp_path, slot, replace_with, target, line):
    cwd = copy_run(run1, tmp_path)
    slot_path = cwd / PAIR / slot
    if replace_with is None:
        size = slot_path.stat().st_size
        flip_a_byte(slot_path)
        assert slot_path.stat().st_size == size
    else:
        source = cwd / (replace_with if replace_with.startswith("results/") else f"{PAIR}/{replace_with}")
        shutil.copy(source, slot_path)
    res = snakemake(cwd, "--", f"{PAIR}/{target}")
    out = res.stdout + res.stderr
    assert res.returncode != 0
    shown = [s for s in out.splitlines() if s.startswith("hybridlens: stitch_")]
    assert len(shown) == 1 and line in shown[0], out[-3000:]
    assert f"{PAIR}/{slot}" in shown[0] and f"rebuild it with: snakemake --cores all --force {PAIR}/{slot}" in shown[0]
    rule = "fit" if target.startswith("maps") else "swap_granite_tiny"
    seed = re.search(r"_s(\d)\.", target).group(1)
    log = (cwd / f"logs/stitch/qwen_tiny--granite_tiny/{rule}_s{seed}.log").read_text()
    assert "Traceback" in log and "StoreError" in log and line in log
    if replace_with is None:  # the command the line gives rebuilds the store, and the job then runs
        res = snakemake(cwd, "--force", "--", f"{PAIR}/{slot}", f"{PAIR}/{target}")
        assert res.returncode == 0, res.stderr[-2000:]


STORE = "results/activations/qwen_tiny/chat4.h5"


def _faulted_extraction(run1, tmp_path, fault):
    """(copy of the run, its `hybridlens:` lines, the result) of one extraction job rerun with `fault`."""
    cwd = copy_run(run1, tmp_path)
    env = {**os.environ, "PYTHONPATH": FAULTS, "HYBRIDLENS_FAULT": fault}
    res = snakemake(cwd, "--forcerun", "extract_activations", "--", STORE, env=env)
    return cwd, [s for s in (res.stdout + res.stderr).splitlines() if s.startswith("hybridlens: ")], res


def test_a_script_failure_gives_one_line_and_its_traceback_in_the_log(run1, tmp_path):
    cwd, shown, res = _faulted_extraction(run1, tmp_path, "dataset:activations/qwen_tiny/:1:raise")
    assert res.returncode != 0 and len(shown) == 1
    log = "logs/extract_activations/qwen_tiny/chat4.log"
    assert re.fullmatch(
        rf"hybridlens: extract_activations \(model=qwen_tiny, task=chat4\) failed: RuntimeError: injected fault at "
        rf"\S+ \(traceback in {log}\)",
        shown[0],
    )
    text = (cwd / log).read_text()
    assert "Traceback (most recent call last)" in text and "RuntimeError: injected fault at" in text
    assert not (cwd / STORE).exists()


def test_a_full_disk_gives_one_line_that_says_so_and_leaves_no_half_store(run1, tmp_path):
    cwd, shown, res = _faulted_extraction(run1, tmp_path, "dataset:activations/qwen_tiny/:2:enospc")
    assert res.returncode != 0 and len(shown) == 1, res.stderr[-2000:]
    assert shown[0].startswith(
        "hybridlens: extract_activations (model=qwen_tiny, task=chat4) failed: the disk is full (no space left on "
        "device); free space where results/ lives"
    )
    assert not (cwd / STORE).exists() and not list((cwd / STORE).parent.glob(".chat4.h5.tmp-*"))


def test_a_broken_patch_fails_the_identity_check_in_one_line_and_keeps_the_tables(run1, tmp_path):
    """Every write-site patch of the circuit job adds 1e-3 to what it writes: the identity transplant is no
    longer the intact forward, validate_circuit says so in one line, and the circuit's tables stay."""
    cwd = copy_run(run1, tmp_path)
    edit_config(cwd, lambda c: c["circuit"].update(models=["qwen_tiny"]))
    out = cwd / "results/circuit/qwen_tiny"
    env = {**os.environ, "PYTHONPATH": FAULTS, "HYBRIDLENS_FAULT": "patch:1e-3:0:self"}
    res = snakemake(cwd, "--forcerun", "circuit", "--", "results/figures/circuit.pdf", env=env)
    shown = [s for s in (res.stdout + res.stderr).splitlines() if s.startswith("hybridlens: ")]
    assert res.returncode != 0 and len(shown) == 1, res.stderr[-3000:]
    assert re.fullmatch(
        r"hybridlens: validate_circuit \(model=qwen_tiny\): check identity_query failed: 'host with its own "
        r"Address-block writes patched in at the final position' and 'intact host \(same prefix continuation, "
        r"eager attention\)' differ by \S+ = \S+ ulps of float32 at magnitude \S+ over \d+ numbers; allowed: "
        r"bit-identical \(circuit.identity_ulps\); its tables are kept in results/circuit/qwen_tiny",
        shown[0],
    )
    for name in ("circuit.json", "items.csv", "transplant.csv", "ablation.csv", "readers.csv", "validation.json"):
        assert (out / name).is_file(), name
    assert not (out / "validated.json").exists()
    stamps = {p.name: p.stat().st_mtime_ns for p in out.iterdir() if not p.name.startswith(".")}  # not seals
    # A new tolerance judges the kept measurements again, without recomputing the circuit: here it lets the
    # broken patch through, which is what a looser tolerance means.
    edit_config(cwd, lambda c: c["circuit"].update(identity_ulps=1e12))
    res = snakemake(cwd, "--", "results/figures/circuit.pdf")
    assert res.returncode == 0, res.stderr[-3000:]
    assert "rule circuit:" not in res.stdout + res.stderr and "rule validate_circuit:" in res.stdout + res.stderr
    assert {p.name: p.stat().st_mtime_ns for p in out.iterdir() if p.name in stamps} == stamps
    verdicts = {v["name"]: v for v in json.loads((out / "validated.json").read_text())}
    assert verdicts["identity_query"]["ulps"] > 0 and verdicts["identity_query"]["allowed_ulps"] == 1e12


def test_every_table_reads_with_pandas(run1):
    tables = [p for p in (run1 / "results").rglob("*") if p.name.endswith((".csv", ".tsv", ".csv.gz"))]
    assert len(tables) > 40
    for path in tables:
        frame = pd.read_csv(path, sep="\t" if path.suffix == ".tsv" else ",")
        assert len(frame.columns) >= 2, path
        if "reason" in frame.columns:  # a table without results says why
            assert frame["reason"].notna().any(), path
    # The test config's falcon_tiny reads in its first layer: no group precedes it, so nothing is transplanted.
    for model in ("falcon_tiny",):
        assert json.loads((run1 / f"results/circuit/{model}/circuit.json").read_text())["address"]["group"] is None
        for name in ("items.csv", "transplant.csv"):
            frame = pd.read_csv(run1 / f"results/circuit/{model}/{name}")
            assert len(frame) == 1 and frame["reason"][0].startswith("no Address group: no linear group precedes")
            assert {"kind", "redirect" if name == "transplant.csv" else "answers_a"} <= set(frame.columns)


def test_adding_a_model_to_the_lists_reruns_only_its_jobs_and_the_pages_that_read_them(run1, tmp_path):
    cwd = copy_run(run1, tmp_path)

    def add(c):
        c["models"]["qwen_tiny_b"] = {
            "family": "qwen3_5",
            "source": {"toy": {**c["models"]["qwen_tiny"]["source"]["toy"], "seed": 1}},
        }
        for section in ("extract", "split_prefill", "circuit"):
            c[section]["models"].append("qwen_tiny_b")
        c["scale"]["models"].append("granite_tiny")  # a model already trained, new to one list
        c["hla"]["adapt_models"].append("qwen_tiny_b")

    edit_config(cwd, add)
    res = snakemake(cwd, "-n")
    assert res.returncode == 0, res.stderr[-2000:]
    jobs = {rule: int(n) for rule, n in re.findall(r"^(\w+)\s+(\d+)$", res.stdout, re.M) if rule != "total"}
    assert jobs == {
        "all": 1,
        "train_toy": 1,
        "evaluate_toy": 1,
        "zoo_tables": 1,
        "plot_zoo": 1,
        "extract_activations": 1,
        "extract_tables": 1,
        "plot_logit_lens": 1,
        "split_prefill": 1,
        "split_prefill_tables": 1,
        "plot_split_retention": 1,
        "plot_state_swap": 1,
        "circuit": 1,
        "validate_circuit": 1,
        "circuit_tables": 1,
        "plot_circuit": 1,
        "scale": 1,
        "scale_tables": 1,
        "plot_scale": 4,
        "hla_adapt": 1,
        "hla_adapt_tables": 1,
        "plot_hla_adapt": 1,
        "summary": 1,
    }


def test_a_changed_table_is_refused_in_one_line_before_any_job_and_nothing_is_lost(run1, tmp_path):
    """A table a later rule reads carries the sha256 its job wrote: one digit changed, or bytes flipped, is
    refused before any job runs, so the figure and combined table built from the good one stay as they are."""
    cwd = copy_run(run1, tmp_path)
    table = cwd / "results/split_prefill/qwen_tiny/retention.tsv"
    record = json.loads((table.parent / ".retention.tsv.provenance").read_text())
    assert record["rule"] == "split_prefill" and record["wildcards"] == {"model": "qwen_tiny"}
    built = [cwd / "results/figures/split_prefill_retention.pdf", cwd / "results/tables/split_prefill_retention.tsv"]
    kept = {p: p.read_bytes() for p in built}
    good = table.read_bytes()
    digit = re.search(rb"\t0\.(\d)", good).start(1)
    for changed in (good[:digit] + (b"7" if good[digit : digit + 1] != b"7" else b"8") + good[digit + 1 :],
                    good[:40] + bytes(b ^ 0xFF for b in good[40:48]) + good[48:]):  # fmt: skip
        table.write_bytes(changed)
        res = snakemake(cwd)
        out = res.stdout + res.stderr
        lines = [s for s in out.splitlines() if "is not what rule split_prefill wrote" in s]
        assert res.returncode != 0 and len(lines) == 1, out[-3000:]
        assert f"rm {table.relative_to(cwd)}" in lines[0] and "to keep your edit, remove" in lines[0]
        assert {p: p.read_bytes() for p in built} == kept and table.read_bytes() == changed
    # Keeping the edit is a choice: without its record the table is read as it is.
    (table.parent / ".retention.tsv.provenance").unlink()
    res = snakemake(cwd, "-n")
    assert res.returncode == 0, (res.stdout + res.stderr)[-3000:]


def test_a_tokenizer_too_small_for_a_task_is_refused_once_at_parse_time(tmp_path):
    """A local checkpoint with Qwen's real BPE keeps 54 keys whole: a 60-pair task is refused while the workflow
    parses, naming the task and the model, instead of failing in each job after its model loads."""
    from hybridlens.models.real_tokenizer import qwen_tokenizer

    cwd = workdir(tmp_path / "run")
    checkpoint = tmp_path / "bpe_local"
    shutil.copytree(REPO / "zoo/qwen_toy", checkpoint)
    for name in ("manifest.json", "tokenizer.json", "tokenizer_config.json"):
        (checkpoint / name).unlink()
    qwen_tokenizer().save_pretrained(checkpoint)

    def use_it(c):
        c["models"]["bpe_local"] = {"family": "qwen3_5", "source": str(checkpoint), "prompts": "raw"}
        c["tasks"]["big"] = {"n_pairs": 60, "n": 4, "format": "chat", "seed": 1}
        c["extract"] = c.get("extract", {}) | {"models": ["bpe_local"], "tasks": ["big"]}

    edit_config(cwd, use_it)
    res = snakemake(cwd, "-n")
    out = res.stdout + res.stderr
    lines = [s for s in out.splitlines() if "too few for 60-pair dictionaries" in s]
    assert res.returncode != 0 and len(lines) == 1, out[-3000:]
    assert f"config extract.tasks big on models.bpe_local: tokenizer of {checkpoint}: single-token words" in lines[0]
    assert "Job stats" not in out


def test_a_path_with_a_space_is_refused_in_one_line_before_any_job(tmp_path):
    """Snakemake does not quote the paths of a job's script command: every job would fail with exit 127."""
    cwd = workdir(tmp_path / "with space")
    res = snakemake(cwd, "-n")
    out = res.stdout + res.stderr
    assert res.returncode != 0, out[-2000:]
    assert f"the project is at {str(cwd)!r}, a path with a space, which snakemake's jobs do not quote" in out
    assert "Job stats" not in out and not (cwd / "results").exists()


def test_a_second_run_beside_a_live_one_is_refused_in_one_line_naming_it(run1, tmp_path):
    """A run paused inside a job holds the directory: a second run on the same targets, one on other targets
    and make run are each refused in one line naming it, no unlock advice is given, and the first run's
    half-written store is left alone and completes."""
    cwd = copy_run(run1, tmp_path)
    for part in ("Makefile", "pyproject.toml"):  # make run's recipe (mtimes kept: the venv is up to date)
        shutil.copy2(REPO / part, cwd / part)
    gate, store = tmp_path / "resume", "results/activations/qwen_tiny/chat4.h5"
    env = {**os.environ, "PYTHONPATH": FAULTS, "HYBRIDLENS_FAULT": "dataset:activations/qwen_tiny/:1:pause"}
    first = subprocess.Popen(
        [SNAKEMAKE, "--cores", "2", "--configfile", CONFIG, "--forcerun", "extract_activations", "--", store],
        cwd=cwd,
        env={**env, "HYBRIDLENS_RESUME": str(gate)},
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    try:
        deadline = time.monotonic() + 120
        while not list((cwd / "results/activations/qwen_tiny").glob(".chat4.h5.tmp-*")):
            assert first.poll() is None and time.monotonic() < deadline, "the first run never reached its pause"
            time.sleep(0.2)
        assert holder(cwd)["pid"] == first.pid
        venv = Path(sys.executable).parent.parent
        second = {
            "same targets": snakemake(cwd, "--forcerun", "extract_activations", "--", store),
            "other targets": snakemake(cwd, "--forcerun", "circuit", "--", "results/circuit/qwen_tiny/circuit.json"),
            "make run": subprocess.run(
                ["make", "run", f"CONFIG={CONFIG}", f"VENV={venv}"], cwd=cwd, capture_output=True, text=True
            ),
        }
        for what, res in second.items():
            out = res.stdout + res.stderr
            shown = [s for s in out.splitlines() if s.startswith("hybridlens: ")]
            assert res.returncode != 0 and len(shown) == 1, (what, out[-3000:])
            assert f"another run is live in this directory (pid {first.pid}, started " in shown[0], (what, shown)
            assert "removed" not in out and "a killed run left its lock" not in out, (what, out[-3000:])
        assert list((cwd / "results/activations/qwen_tiny").glob(".chat4.h5.tmp-*"))  # not swept away
    finally:
        gate.touch()
        out, _ = first.communicate(timeout=300)
    assert first.returncode == 0, out[-3000:]
    assert holder(cwd) is None
    a, _ = read_store(run1 / store)
    b, _ = read_store(cwd / store)
    assert a.keys() == b.keys() and all(np.array_equal(a[k], b[k]) for k in a)


def test_killed_writers_leave_nothing_behind_and_the_rerun_equals_an_undisturbed_run(run1, tmp_path):
    """SIGKILL a toy's training while its checkpoint is moved into place, then the whole workflow while an
    extraction writes its HDF5 store; make run then names the unlock command, and the rerun redoes both
    outputs. Only those two are asked for: run1 already holds the whole workflow, whose every job costs a
    Python start."""
    cwd = workdir(tmp_path)
    for part in ("Makefile", "pyproject.toml"):  # make run's recipe (mtimes kept: the venv is up to date)
        shutil.copy2(REPO / part, cwd / part)
    env = {**os.environ, "PYTHONPATH": FAULTS}
    killed_save = {**env, "HYBRIDLENS_FAULT": "replace:results/models/falcon_tiny/:2:self"}
    res = snakemake(cwd, "--", "results/models/falcon_tiny/eval.json", env=killed_save)
    assert res.returncode != 0
    left = list((cwd / "results/models").glob(".tmp-*"))
    assert len(left) == 1 and any(left[0].iterdir())  # killed with the checkpoint half moved into place

    killed_run = {**env, "HYBRIDLENS_FAULT": "dataset:results/activations/qwen_tiny/:3:group"}
    disturbed = ["results/models/falcon_tiny/eval.json", "results/activations/qwen_tiny/chat4.h5"]
    res = subprocess.run(
        [SNAKEMAKE, "--cores", "2", "--configfile", CONFIG, "--workflow-profile", "profiles/local", "--", *disturbed],
        cwd=cwd,
        env=killed_run,
        capture_output=True,
        text=True,
        start_new_session=True,  # its own process group, which the fault kills whole
    )
    assert res.returncode == -9
    assert f"hybridlens: removed {left[0].relative_to(cwd)}, left by a killed run" in res.stderr
    assert list((cwd / "results/activations/qwen_tiny").glob(".chat4.h5.tmp-*"))  # caught mid-write

    venv = Path(sys.executable).parent.parent
    res = subprocess.run(["make", "run", f"CONFIG={CONFIG}", f"VENV={venv}"], cwd=cwd, capture_output=True, text=True)
    assert res.returncode != 0
    unlock = f"{venv}/bin/snakemake --unlock --cores 1 --workflow-profile profiles/local --configfile {CONFIG}"
    assert "hybridlens: a killed run left its lock" in res.stdout and f"  {unlock}\n" in res.stdout, res.stdout[-2000:]
    assert subprocess.run(shlex.split(unlock), cwd=cwd, capture_output=True).returncode == 0

    res = snakemake(cwd, "--workflow-profile", "profiles/local", "--", *disturbed)
    assert res.returncode == 0, res.stderr[-3000:]
    assert not [p for p in (cwd / "results").rglob(".*") if ".tmp-" in p.name]
    weights = {d: load_file(d / "results/models/falcon_tiny/model.safetensors") for d in (run1, cwd)}
    assert weights[run1].keys() == weights[cwd].keys()
    assert all(np.array_equal(weights[run1][k].numpy(), weights[cwd][k].numpy()) for k in weights[run1])
    a, _ = read_store(run1 / "results/activations/qwen_tiny/chat4.h5")
    b, _ = read_store(cwd / "results/activations/qwen_tiny/chat4.h5")
    assert a.keys() == b.keys() and all(np.array_equal(a[k], b[k]) for k in a)
