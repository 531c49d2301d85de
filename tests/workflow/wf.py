"""Helpers of the workflow tests: a copy of the workflow in a temporary directory, and snakemake on it."""

import shutil
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
SNAKEMAKE = str(Path(sys.executable).with_name("snakemake"))
PARTS = ["Snakefile", "rules", "workflow_scripts", "config", "profiles", "report", "environment.yml", "tests/config"]
PARTS += ["zoo", "studies"]  # the shipped checkpoints the default config loads; the studies
MODELS = ["qwen_tiny", "granite_tiny", "falcon_tiny"]
FAMILY_TOYS = ["nemotron_tiny", "next_tiny"]  # two more families, through circuit and split-prefill


def workdir(tmp_path):
    for part in PARTS:
        src, dst = REPO / part, tmp_path / part
        dst.parent.mkdir(parents=True, exist_ok=True)
        (shutil.copytree if src.is_dir() else shutil.copy)(src, dst)
    return tmp_path


def snakemake(cwd, *args, configfile="tests/config/config.yaml", **kw):
    cmd = [SNAKEMAKE, "--cores", "2", "--configfile", configfile, *args]
    return subprocess.run(cmd, cwd=cwd, capture_output=True, text=True, **kw)
