"""Two runs of one workflow on two float paths, compared output by output.

A float path is what decides a CPU run's rounding: the vector units torch's kernels use (the machine's, or
ATEN_CPU_CAPABILITY=default for the portable ones), MKL's code path, the thread count. The same workflow on
two paths must give the same item-level answers (every integer and text cell: answers, generated tokens,
chosen layers and groups), and every float within RTOL of the largest magnitude of its column (a table),
its file (JSON) or its dataset (HDF5): half of float32's digits, as the pipeline's path checks allow
(hybridlens.validation). A number that agrees only on one CPU then fails on any machine.

The circuit's validations measure rounding itself (how far two paths of one run differ); each run judges
its own, so they are not compared. Outputs of training inside the run (TRAINED: the HLA adaptation
fine-tunes a model) are the one exception: every optimiser step feeds rounding back into the weights, so
after the first step two paths follow two trajectories. Their rows before training are compared as above;
the rest is reported, not judged.

compare_runs   [Result] for every table, JSON and HDF5 store under results/ of run A, against run B
python -m hybridlens.compare_runs A B [--skip GLOB ...]   one line per output; exit 1 if any differs beyond
                                         its tolerance
"""

import argparse
import fnmatch
import json
import math
import sys
from dataclasses import dataclass, field
from pathlib import Path

import h5py
import numpy as np
import pandas as pd

from hybridlens.validation import path_ulps

RTOL = path_ulps("float32") * float(np.finfo(np.float32).eps)  # = sqrt(eps): half of float32's digits
# Outputs of training inside the run -> the rows that precede training (a pandas query), compared as any.
TRAINED = {"hla/adapt/*/curve.csv": "step == 0", "hla/adapt/*/*.csv": "phase == 'before'"}
TRAINED |= {"tables/hla_adapt.tsv": "mode.str.endswith(':before')"}
SUFFIXES = (".csv", ".tsv", ".csv.gz", ".json", ".h5")
# Measurements of rounding itself (how far two paths of one run differ), judged within each run by its own rule.
ROUNDING = ("validation.json", "validated.json", "circuit_validations.tsv")
# HDF5 attributes that hash the data or name the run: they differ wherever one float does.
RUN_ATTRS = ("sha256", "checksum", "created", "machine", "git_commit")


@dataclass
class Result:
    path: str
    ok: bool
    what: str  # one line: what was compared and the largest difference
    problems: list = field(default_factory=list)  # first few differences, for the reader


def _relative(a: np.ndarray, b: np.ndarray) -> float:
    """Largest |a - b| over the larger of the two arrays' largest magnitudes (NaN equals NaN)."""
    a, b = np.asarray(a, dtype=float), np.asarray(b, dtype=float)
    both = np.isnan(a) & np.isnan(b)
    if (np.isnan(a) != np.isnan(b)).any():
        return math.inf
    diff = np.abs(np.where(both, 0, a - b))
    scale = max(np.nanmax(np.abs(a), initial=0), np.nanmax(np.abs(b), initial=0))
    worst = float(diff.max(initial=0))
    return worst / scale if scale > 0 else (0.0 if worst == 0 else math.inf)


def _read_table(path: Path) -> pd.DataFrame:
    return pd.read_csv(path, sep="\t" if path.name.endswith(".tsv") else ",", keep_default_na=False, na_values=[""])


def compare_tables(a: pd.DataFrame, b: pd.DataFrame, name: str = "") -> Result:
    """Exact equality of every non-float column, RTOL of the column's magnitude on every float column."""
    if list(a.columns) != list(b.columns) or len(a) != len(b):
        return Result(name, False, f"shape {a.shape} {list(a.columns)} against {b.shape} {list(b.columns)}")
    problems, worst, worst_col = [], 0.0, None
    for col in a.columns:
        floats = pd.api.types.is_float_dtype(a[col]) or pd.api.types.is_float_dtype(b[col])
        if floats and pd.api.types.is_numeric_dtype(a[col]) and pd.api.types.is_numeric_dtype(b[col]):
            rel = _relative(a[col].to_numpy(), b[col].to_numpy())
            if rel > worst:
                worst, worst_col = rel, col
            if rel > RTOL:
                problems.append(f"column {col}: relative difference {rel:.2e} > {RTOL:.2e}")
            continue
        missing_a, missing_b = a[col].isna().to_numpy(), b[col].isna().to_numpy()
        differ = (missing_a != missing_b) | (
            ~missing_a & ~missing_b & (a[col].astype(str).to_numpy() != b[col].astype(str).to_numpy())
        )
        for i in np.flatnonzero(differ)[:3]:
            problems.append(f"row {i} column {col}: {a[col].iloc[i]} against {b[col].iloc[i]}")
        if differ.sum() > 3:
            problems.append(f"column {col}: {int(differ.sum())} of {len(a)} rows differ")
    where = f", largest relative float difference {worst:.2e} ({worst_col})" if worst_col else ""
    return Result(
        name,
        not problems,
        f"{len(a)} rows, every answer identical{where}" if not problems else f"{len(a)} rows{where}",
        problems,
    )


def _leaves(obj, prefix=""):
    if isinstance(obj, dict):
        for k, v in obj.items():
            yield from _leaves(v, f"{prefix}.{k}" if prefix else str(k))
    elif isinstance(obj, list):
        for i, v in enumerate(obj):
            yield from _leaves(v, f"{prefix}[{i}]")
    else:
        yield prefix, obj


def compare_json(a, b, name: str = "") -> Result:
    """Exact equality of structure, strings, booleans and integers; floats within RTOL of the file's largest."""
    la, lb = dict(_leaves(a)), dict(_leaves(b))
    if la.keys() != lb.keys():
        return Result(name, False, f"other keys: {sorted(la.keys() ^ lb.keys())[:5]}")
    is_float = {k: isinstance(la[k], float) or isinstance(lb[k], float) for k in la}
    problems = [f"{k}: {la[k]!r} against {lb[k]!r}" for k in la if not is_float[k] and la[k] != lb[k]]
    floats = [k for k in la if is_float[k]]
    scale = max([abs(la[k]) for k in floats if la[k] is not None and math.isfinite(la[k])], default=0)
    worst, worst_key = 0.0, None
    for k in floats:
        x, y = (np.nan if v is None else float(v) for v in (la[k], lb[k]))
        diff = 0.0 if (np.isnan(x) and np.isnan(y)) or x == y else abs(x - y)
        rel = diff / scale if scale > 0 else (0.0 if diff == 0 else math.inf)
        if rel > worst:
            worst, worst_key = rel, k
        if not rel <= RTOL:
            problems.append(f"{k}: {x!r} against {y!r}, relative difference {rel:.2e} > {RTOL:.2e}")
    where = f", largest relative float difference {worst:.2e} ({worst_key})" if worst_key else ""
    return Result(name, not problems, f"{len(la)} values{where}", problems)


def _datasets(f) -> list[str]:
    found = []
    f.visititems(lambda k, v: found.append(k) if isinstance(v, h5py.Dataset) else None)  # None: visit on
    return found


def compare_stores(a_path: Path, b_path: Path, name: str = "") -> Result:
    """Every dataset of two HDF5 files within RTOL of its magnitude; attributes, but for checksums, exact."""
    problems, worst, worst_name, n = [], 0.0, None, 0
    with h5py.File(a_path, "r") as fa, h5py.File(b_path, "r") as fb:
        names, other = _datasets(fa), _datasets(fb)
        if set(names) != set(other):
            return Result(name, False, f"other datasets: {sorted(set(names) ^ set(other))[:5]}")
        for k in sorted(names):
            x, y = fa[k][()], fb[k][()]
            n += 1
            if x.shape != y.shape:
                problems.append(f"{k}: shape {x.shape} against {y.shape}")
            elif np.issubdtype(x.dtype, np.floating):
                rel = _relative(x, y)
                if rel > worst:
                    worst, worst_name = rel, k
                if rel > RTOL:
                    problems.append(f"{k}: relative difference {rel:.2e} > {RTOL:.2e}")
            elif not np.array_equal(x, y):
                problems.append(f"{k}: differs")
        for obj in [fa, *(fa[k] for k in names)]:
            for key, value in obj.attrs.items():
                if any(mark in key for mark in RUN_ATTRS):
                    continue
                theirs = fb[obj.name].attrs.get(key)
                if str(value) != str(theirs):
                    problems.append(f"{obj.name} attribute {key}: {value!r} against {theirs!r}")
    where = f", largest relative difference {worst:.2e} ({worst_name})" if worst_name else ""
    return Result(name, not problems, f"{n} datasets{where}", problems)


def _trained_rows(rel: str) -> str | None:
    return next((query for pattern, query in TRAINED.items() if fnmatch.fnmatch(rel, pattern)), None)


def compare_output(a: Path, b: Path, rel: str) -> Result:
    """One output file of run A against run B's."""
    if not b.is_file():
        return Result(rel, False, "missing in run B")
    if rel.endswith(".h5"):
        return compare_stores(a, b, rel)
    if rel.endswith(".json"):
        return compare_json(json.loads(a.read_text()), json.loads(b.read_text()), rel)
    ta, tb = _read_table(a), _read_table(b)
    query = _trained_rows(rel)
    if query is None:
        return compare_tables(ta, tb, rel)
    rest = compare_tables(ta, tb, rel)
    before = compare_tables(ta.query(query), tb.query(query), rel)
    note = "identical" if rest.ok else f"differs after training: {rest.problems[0]}"
    return Result(
        rel, before.ok, f"before training: {before.what}; trained in the run (not judged): {note}", before.problems
    )


def compare_runs(a_dir, b_dir, skip=()) -> list[Result]:
    """Every output under results/ of run A (tables, JSON, HDF5 stores) against run B's, but those whose path
    under results/ matches a pattern of `skip` (outputs run B did not make)."""
    a_root, b_root = Path(a_dir) / "results", Path(b_dir) / "results"
    found = sorted(
        p
        for p in a_root.rglob("*")
        if p.is_file() and p.name.endswith(SUFFIXES) and p.name not in ROUNDING and ".tmp-" not in p.name
    )
    if not found:
        raise FileNotFoundError(f"{a_root} holds no tables, JSON or HDF5 stores: give a finished run")
    found = [p for p in found if not any(fnmatch.fnmatch(str(p.relative_to(a_root)), g) for g in skip)]
    return [compare_output(p, b_root / p.relative_to(a_root), str(p.relative_to(a_root))) for p in found]


def main(argv=None):
    parser = argparse.ArgumentParser(prog="python -m hybridlens.compare_runs", description=__doc__.splitlines()[0])
    parser.add_argument("run_a", help="a finished run's directory (holding results/)")
    parser.add_argument("run_b", help="the same workflow's run on another float path")
    parser.add_argument("--skip", nargs="*", default=[], metavar="GLOB", help="outputs under results/ not compared")
    args = parser.parse_args(argv)
    results = compare_runs(args.run_a, args.run_b, args.skip)
    for r in results:
        print(f"{'ok  ' if r.ok else 'FAIL'} {r.path}: {r.what}")
        for p in r.problems[:5]:
            print(f"       {p}")
    failed = [r for r in results if not r.ok]
    print(f"{len(results) - len(failed)} of {len(results)} outputs agree (floats within {RTOL:.2e} relative)")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
