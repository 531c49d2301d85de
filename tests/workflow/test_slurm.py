"""The workflow through profiles/slurm on a real single-node SLURM cluster.

`.ci/slurm-cluster up` starts one (CI does, and sets HYBRIDLENS_SLURM=1 so that a missing cluster fails the
suite instead of skipping it).
"""

import json
import os
import re
import shutil
import subprocess

import numpy as np
import pytest
import yaml
from wf import MODELS, snakemake, workdir

from hybridlens.store import read_store


def cluster_is_up():
    if not shutil.which("sinfo"):
        return False
    res = subprocess.run(["sinfo", "-h", "-N", "-o", "%t"], capture_output=True, text=True)
    return res.returncode == 0 and "idle" in res.stdout.split()


@pytest.fixture(scope="module", autouse=True)
def cluster():
    """Asked when the module's first test runs, before its jobs are submitted, not when tests are collected:
    a controller that answered then may be gone by now."""
    if not cluster_is_up():
        if os.environ.get("HYBRIDLENS_SLURM") == "1":
            pytest.fail("HYBRIDLENS_SLURM=1 but no idle SLURM node; start one with .ci/slurm-cluster up", pytrace=False)
        pytest.skip("no SLURM cluster here (.ci/slurm-cluster up starts one)")


# Poll the queue often: the profile's defaults suit a real cluster, not a 30-second test workflow.
POLL = ["--slurm-init-seconds-before-status-checks", "1", "--seconds-between-status-checks", "2"]


# Each SLURM job starts its own Python, so the runs ask for a slice of the workflow: training, evaluation, one
# experiment over three models (qwen_tiny's is made to fail), a figure reading all three, and another model's
# experiment that does not wait on them. The whole workflow runs locally in the other workflow tests.
TARGETS = ["results/tables/logit_lens_chat4.tsv", "results/split_prefill/granite_tiny/retention.tsv"]


def slurm(cwd, *args):
    return snakemake(cwd, "--workflow-profile", "profiles/slurm", "--slurm-no-account", *POLL, *args)


def set_resources(cwd, model, **resources):
    path = cwd / "tests/config/config.yaml"
    cfg = yaml.safe_load(path.read_text())
    cfg["models"][model]["resources"] = resources
    path.write_text(yaml.safe_dump(cfg, sort_keys=False))


def rules_run(res):
    """The rules a snakemake run executed, from its job announcements."""
    return set(re.findall(r"^\s*(?:local)?rule (\w+):$", res.stdout + res.stderr, re.M))


@pytest.fixture(scope="module")
def slurm_runs(cluster, tmp_path_factory):
    """First run: qwen_tiny's extraction asks for 100 MB and is killed by SLURM. Second run: fixed, resumed."""
    cwd = workdir(tmp_path_factory.mktemp("slurm"))
    original = (cwd / "tests/config/config.yaml").read_text()
    set_resources(cwd, "qwen_tiny", mem_mb=100, runtime=5)
    first = slurm(cwd, "--", *TARGETS)
    first.left = sorted(  # every file but the seals of finished tables (a temporary would be listed)
        str(p.relative_to(cwd))
        for p in cwd.glob("results/activations/**/*")
        if p.is_file() and not p.name.endswith(".provenance")
    )
    trained = {p: p.stat().st_mtime_ns for p in cwd.glob("results/models/*/*.safetensors")}
    (cwd / "tests/config/config.yaml").write_text(original)
    second = slurm(cwd, "--", *TARGETS)
    return cwd, first, second, trained


def test_job_over_its_memory_request_is_reported_with_its_slurm_log(slurm_runs):
    cwd, first, _, _ = slurm_runs
    out = first.stdout + first.stderr
    assert first.returncode != 0
    # The error report names the job's SLURM log, where SLURM's reason is.
    report = re.search(r"Error in rule extract_activations:.*?\n\s*log: ([^\n]*)", out, re.S)
    assert report, out[-3000:]
    logs = re.findall(r"\S*\.snakemake/slurm_logs/rule_extract_activations/qwen_tiny_chat4/\d+\.log", report[1])
    assert logs, report[0]
    assert "exceeded memory limit" in (cwd / logs[0]).read_text()
    # keep-going: the other models' extractions finished; the killed one left nothing, not even a temporary.
    assert first.left == [
        f"results/activations/{m}/chat4.{ext}" for m in ("falcon_tiny", "granite_tiny") for ext in ("h5", "lens.tsv")
    ]


def test_rerun_resumes_without_redoing_finished_jobs(slurm_runs):
    cwd, _, second, trained = slurm_runs
    assert second.returncode == 0, second.stderr[-3000:]
    # Only qwen_tiny's extraction (killed the first time) and the table that reads it; no training, and not
    # granite_tiny's split-prefill, which finished under keep-going.
    assert rules_run(second) == {"extract_activations", "extract_tables"}
    assert trained and trained == {p: p.stat().st_mtime_ns for p in trained}


def test_slurm_results_equal_a_local_run(slurm_runs, run1):
    cwd = slurm_runs[0]
    for name in MODELS:
        local = json.loads((run1 / f"results/models/{name}/eval.json").read_text())
        assert json.loads((cwd / f"results/models/{name}/eval.json").read_text()) == local
        a, _ = read_store(run1 / f"results/activations/{name}/chat4.h5")
        b, _ = read_store(cwd / f"results/activations/{name}/chat4.h5")
        assert a.keys() == b.keys()
        for k in a:
            np.testing.assert_array_equal(a[k], b[k])
    tables = [*TARGETS, "results/split_prefill/granite_tiny/items.tsv", "results/split_prefill/granite_tiny/swap.tsv"]
    for table in tables:
        assert (cwd / table).read_text() == (run1 / table).read_text(), table


def test_gpu_request_and_own_partition_reach_sbatch(slurm_runs, tmp_path):
    """The test cluster has no GPUs: SLURM refuses the job, and Snakemake shows the sbatch call it made.

    The partition comes from a user's copy of the profile, as the README shows.
    """
    cwd = tmp_path / "gpu"
    shutil.copytree(slurm_runs[0], cwd)
    shutil.copytree(cwd / "profiles/slurm", cwd / "profiles/mycluster")
    profile = cwd / "profiles/mycluster/profile.yaml"
    cfg = yaml.safe_load(profile.read_text())
    cfg["default-resources"]["slurm_partition"] = "main"
    profile.write_text(yaml.safe_dump(cfg))
    set_resources(cwd, "qwen_tiny", gpus=1, cpus=2, mem_mb=3000, runtime=7)
    res = snakemake(
        cwd,
        *("--workflow-profile", "profiles/mycluster", "--slurm-no-account", *POLL),
        *("--forcerun", "extract_activations", "--", "results/activations/qwen_tiny/chat4.h5"),
    )
    out = res.stdout + res.stderr
    calls = re.findall(r"sbatch call:\s*\n?\s*(sbatch .*)", out)
    assert res.returncode != 0 and calls, out[-3000:]
    call = calls[0]
    assert "--gpus=1" in call and "--cpus-per-task=2" in call
    assert "--mem 3000" in call and "-t 7" in call and re.search(r"-p '?main'?", call), call
    assert "generic resource" in out.lower() or "gres" in out.lower(), out[-2000:]
