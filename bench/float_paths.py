"""The default run twice, on two float paths, and every item-level difference between them. Not a test.

Run A uses the machine's defaults; run B forces other kernels: MKL's conditional-numerical-reproducibility
mode (MKL_CBWR=COMPATIBLE), torch's portable CPU kernels (ATEN_CPU_CAPABILITY=default) and two threads
per job instead of one. Each run starts from a copy of this checkout (no results), so its wall time is a
cold default run. Prints each run's time and, per item table, the rows whose answers differ and the
largest difference of every numeric column.

    python bench/float_paths.py [--keep DIR] [--a FINISHED_RUN]
"""

import argparse
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import pandas as pd

REPO = Path(__file__).resolve().parents[1]
PARTS = ["Snakefile", "rules", "workflow_scripts", "config", "profiles", "report", "environment.yml", "zoo"]
SNAKEMAKE = str(Path(sys.executable).with_name("snakemake"))
EXPERIMENTS = ["extract_activations", "split_prefill", "circuit", "scale", "stitch_acts", "stitch_swap"]
EXPERIMENTS += ["hla_scratch", "hla_adapt"]
RUNS = {
    "A": ({}, []),
    "B": (
        {"MKL_CBWR": "COMPATIBLE", "ATEN_CPU_CAPABILITY": "default"},
        ["--set-threads", *(f"{rule}=2" for rule in EXPERIMENTS)],
    ),
}
# Per-item answers (compared exactly) in each item table; every other numeric column is compared by value.
ANSWERS = ["correct", "redirect", "answers_a", "answers_b", "generated", "retrieval", "language", "persona", "pred"]


def run(name, root):
    cwd = root / name
    cwd.mkdir(parents=True)
    for part in PARTS:
        (shutil.copytree if (REPO / part).is_dir() else shutil.copy)(REPO / part, cwd / part)
    env, extra = RUNS[name]
    start = time.perf_counter()
    res = subprocess.run(
        [SNAKEMAKE, "--cores", "2", "--workflow-profile", "profiles/local", *extra],
        cwd=cwd,
        env={**os.environ, **env},
        capture_output=True,
        text=True,
    )
    seconds = time.perf_counter() - start
    if res.returncode:
        sys.exit(f"run {name} failed:\n{res.stderr[-3000:]}")
    start = time.perf_counter()
    subprocess.run([SNAKEMAKE, "--cores", "2", "-n"], cwd=cwd, capture_output=True, check=True)
    print(f"run {name} {env or 'defaults'}: {seconds:.0f} s cold, dry rerun {time.perf_counter() - start:.1f} s")
    return cwd


def item_tables(cwd):
    found = [p for p in (cwd / "results").rglob("*") if p.name.startswith(("items", "eval"))]
    return sorted(p.relative_to(cwd) for p in found if p.suffix in (".csv", ".tsv", ".gz"))


def compare(a_dir, b_dir):
    for rel in item_tables(a_dir):
        sep = "\t" if rel.suffix == ".tsv" else ","
        a, b = pd.read_csv(a_dir / rel, sep=sep), pd.read_csv(b_dir / rel, sep=sep)
        if a.shape != b.shape or list(a.columns) != list(b.columns):
            print(f"{rel}: shape {a.shape} vs {b.shape}")
            continue
        answers = [c for c in ANSWERS if c in a.columns]
        both_missing = a[answers].isna() & b[answers].isna()
        differ = ((a[answers] != b[answers]) & ~both_missing).any(axis=1)
        numeric = [c for c in a.select_dtypes("number").columns if c not in answers]
        gaps = {c: np.nanmax(np.abs(a[c].to_numpy(float) - b[c].to_numpy(float)), initial=0) for c in numeric}
        worst = max(gaps, key=gaps.get) if gaps else None
        note = f", largest numeric difference {gaps[worst]:.2e} ({worst})" if worst else ""
        print(f"{rel}: {int(differ.sum())} of {len(a)} rows with another answer{note}")
        for i in np.flatnonzero(differ.to_numpy())[:5]:
            print("   A:", a.iloc[i][answers].to_dict(), " B:", b.iloc[i][answers].to_dict())


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--keep", help="run in this directory and keep it (default: a temporary one)")
    parser.add_argument("--a", help="a finished default run (e.g. a fresh clone after make run) to use as run A")
    args = parser.parse_args()
    root = Path(args.keep or tempfile.mkdtemp(prefix="float-paths-"))
    try:
        dirs = [Path(args.a) if name == "A" and args.a else run(name, root) for name in RUNS]
        compare(*dirs)
    finally:
        if not args.keep:
            shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    main()
