"""results/summary.md: each experiment's headline numbers, with intervals, read from the tables a run wrote.

summarize  the whole page from {section: table path}; a section whose table the run did not make is left out

Every number is a table's, formatted as `rate [lo, hi]` (95 % bootstrap or Wilson intervals, as the table
gives them); nothing is computed here but selections.
"""

import json
from pathlib import Path

import pandas as pd


def _ci(value, lo=None, hi=None) -> str:
    if pd.isna(value):
        return "–"
    if lo is None or pd.isna(lo):
        return f"{value:.3f}"
    return f"{value:.3f} [{lo:.3f}, {hi:.3f}]"


def _table(header, rows) -> list[str]:
    lines = ["| " + " | ".join(header) + " |", "|" + " --- |" * len(header)]
    return lines + ["| " + " | ".join(str(c) for c in row) + " |" for row in rows]


def _read(path):
    return pd.read_csv(path, sep="\t")


def _zoo(path):
    t = _read(path)
    t = t[t["metric"] == "retrieval"]
    formats = list(dict.fromkeys(t["format"]))
    rows = []
    for model, g in t.groupby("model", sort=False):
        g = g.set_index("format")
        cells = [_ci(*g.loc[f, ["value", "ci_lo", "ci_hi"]]) if f in g.index else "–" for f in formats]
        rows.append([model, g["n_pairs"].iloc[0], *cells, g["gate"].iloc[0]])
    return "Toy zoo: held-out retrieval per format", _table(["model", "pairs", *formats, "gate"], rows)


def _redirect(g, kind, block, donor):
    """The final-position redirect of one transplant condition of one model, with its interval."""
    r = g[(g["kind"] == kind) & (g["block"] == block) & (g["donor"] == donor) & g["positions"].isin(["final", ""])]
    return _ci(*r.iloc[0][["redirect", "redirect_lo", "redirect_hi"]]) if len(r) else "–"


def _circuit(path):
    t = _read(path).fillna("")
    conditions = [("none", "", ""), ("query", "address", "same_dict"), ("query", "control_group", "same_dict")]
    conditions += [("query", "address", "other_dict"), ("state", "address", "same_dict")]
    rows = [[model, *(_redirect(g, *c) for c in conditions)] for model, g in t.groupby("model", sort=False)]
    header = ["model", "no transplant", "Address block", "control group", "other dictionary", "state transplant"]
    return "Encode–Address circuit: redirect rate of the final-position query transplant", _table(header, rows)


def _circuit_tasks(paths):
    """Per model and task of circuit.tasks: how often the item answers its donor's answer after each
    final-position transplant."""
    conditions = [("none", ""), ("query", "address"), ("query", "control_group"), ("state", "address")]
    rows = []
    for path in paths:
        t = _read(path).fillna("")
        for (model, task), g in t.groupby(["model", "task"], sort=False):
            cells = []
            for kind, block in conditions:
                r = g[(g["kind"] == kind) & (g["block"] == block) & g["positions"].isin(["final", ""])]
                cells.append(
                    _ci(*r.iloc[0][["answers_donor", "answers_donor_lo", "answers_donor_hi"]]) if len(r) else "–"
                )
            rows.append([model, task, g["n"].iloc[0], *cells])
    header = ["model", "task", "items", "no transplant", "Address block", "control group", "state transplant"]
    return "Circuit on your own items: rate of answering the donor's answer", _table(header, rows)


def _validations(path):
    """Every built-in check of every model: its two computations' difference against the tolerance."""
    t = _read(path)
    rows = [
        [r.model, r.name, f"{r.ulps:.3g}", f"{r.allowed_ulps:.4g}", r.dtype, "passed" if r.passed else "FAILED"]
        for r in t.itertuples()
    ]
    header = ["model", "check", "difference (ulps)", "allowed (ulps)", "dtype", "verdict"]
    return "Built-in validations: identity transplants and the engine's shortcut (docs/circuit.md)", _table(
        header, rows
    )


def _split(path):
    """Content and style through each channel, and whether the intact model reads its style cues' KV; the
    persona also as a multiple of its rate without one, as the paper gives it."""
    t = _read(path)
    conditions = [c for c in ("kv_only", "state_only", "state_swap", "cues_kv_neutral") if c in set(t["condition"])]
    rows = []
    for (model, prop), g in t.groupby(["model", "property"], sort=False):
        g = g.set_index("condition")
        full = _ci(*g.loc["full", ["metric", "metric_lo", "metric_hi"]])
        rows.append(
            [model, prop, full, *[_ci(*g.loc[c, ["retention", "retention_lo", "retention_hi"]]) for c in conditions]]
        )
        if prop == "persona" and "over_baseline" in g:
            over = [
                _ci(*g.loc[c, ["over_baseline", "over_baseline_lo", "over_baseline_hi"]]) for c in ["full", *conditions]
            ]
            rows.append([model, "persona × its no-persona rate", *over])
    header = ["model", "property", "full cache (rate)", *conditions]
    return "Split-prefill: retention against the full cache", _table(header, rows)


def _scale(path):
    t = _read(path)
    rows = [
        [
            r["model"],
            r["parameters"],
            r["verdict"],
            r["groups_needed"],
            r["best_single"],
            f"{r['best_single_redirect']:.3f}",
        ]
        for _, r in t.iterrows()
    ]
    header = ["model", "parameters", "verdict", "groups needed", "best single group", "its redirect"]
    return "Scale sweep: where the Address computation lives", _table(header, rows)


def _stitch(paths):
    rows = []
    for path in paths:
        t = _read(path)
        for (receiver, donor), g in t.groupby(["receiver", "donor"], sort=False):
            g = g[(g["transfer"] == "address") & (g["measure"] == "accuracy")].set_index("condition")
            cells = [
                _ci(*g.loc[c, ["rate", "lo", "hi"]]) if c in g.index else "–"
                for c in ("intact", "stitched", "shuffled_map", "ablated")
            ]
            rows.append([receiver, donor, *cells])
    header = ["receiver", "donor", "intact", "donor's Address block", "shuffled map", "block ablated"]
    return "Stitching: the receiver's accuracy with the donor's Address block swapped in", _table(header, rows)


def _query_content(paths):
    rows = []
    for path in paths:
        t = _read(path)
        for model, g in t.groupby("model", sort=False):
            cells = [" / ".join(f"{v:.2f}" for v in g[g["content"] == c]["r2_test"]) for c in ("key", "answer")]
            rows.append([model, *cells])
    header = ["model", "R² of the queried key's embedding", "R² of the answer's embedding"]
    heading = (
        "Stitching: what each model's Address write at the final token holds "
        "(R² on test prompts, one value per key split)"
    )
    return heading, _table(header, rows)


def _hla(path, tasks=("macro",)):
    t = _read(path)
    lengths = sorted(t["length"].unique())
    rows = []
    for task in tasks:
        for mode, g in t[t["task"] == task].groupby("mode", sort=False):
            g = g.set_index("length")
            router = g["router"].iloc[0] if "router" in g and isinstance(g["router"].iloc[0], str) else ""
            label = f"{mode} ({router} router)" if router else mode
            rows.append([label, task] + [_ci(*g.loc[n, ["accuracy", "lo", "hi"]]) for n in lengths])
    return "HLA: accuracy by context length", _table(["mode", "task", *map(str, lengths)], rows)


def _hla_scratch(path):
    """Macro over the suite, and MQAR: its dictionary outgrows a head's state beyond the training length."""
    return _hla(path, ("macro", "mqar"))


def _gates(path):
    t = _read(path).dropna(subset=["gate"])
    heading = "HLA router: mean gate at MQAR's answers on the chunk holding the asked pair / other pairs / filler"
    if t.empty:  # only GDN models: no gates
        return heading, ["No chunk-mixing model in this run."]
    ends = [t["length"].min(), t["length"].max()]
    t = t[t["length"].isin(ends)].pivot_table(
        index=["mode", "seed", "layer"], columns=["length", "chunk"], values="gate"
    )
    rows = []
    for (mode, seed, layer), g in t.iterrows():
        cells = [" / ".join(_ci(g.get((n, c), float("nan"))) for c in ("asked", "pairs", "filler")) for n in ends]
        rows.append([f"{mode} seed {seed}", layer, *cells])
    return heading, _table(["model", "layer", *map(str, ends)], rows)


def _ruler(path):
    t = _read(path)
    t = t[t["task"] == "macro"]
    lengths = sorted(t["length"].unique())
    rows = []
    for (model, phase), g in t.groupby(["model", "phase"], sort=False):
        g = g.set_index("length")
        rows.append([model, phase, *(f"{g.loc[n, 'score']:.3f}" if n in g.index else "" for n in lengths)])
    heading = "HLA adaptation on RULER: mean score over its tasks by length (tokens), per model and phase"
    return heading, _table(["model", "phase", *map(str, lengths)], rows)


SECTIONS = {
    "zoo": _zoo,
    "circuit": _circuit,
    "circuit_validations": _validations,
    "circuit_tasks": _circuit_tasks,
    "split_prefill": _split,
    "scale": _scale,
    "stitch": _stitch,
    "stitch_query": _query_content,
    "hla_length": _hla_scratch,
    "hla_gates": _gates,
    "hla_adapt": _hla,
    "hla_ruler": _ruler,
}


def _models(models: dict) -> list[str]:
    """Registry name, family and source of every model; a shipped toy's source names the commit it was
    trained at."""
    rows = []
    for name, entry in models.items():
        source = entry["source"]
        if isinstance(source, dict):
            source = f"{next(iter(source))} spec, built in this run"
        else:
            trained = Path(source, "trained_on.json")
            if trained.is_file():
                source += f" (shipped, trained at {json.loads(trained.read_text()).get('commit', 'unknown')[:10]})"
        rows.append([name, entry["family"], source])
    return _table(["model", "family", "source"], rows)


def summarize(tables: dict, models: dict | None = None, title: str = "hybridlens results") -> str:
    """Markdown for `tables`: {section: path (stitch: a list of paths)}, in SECTIONS order, after the
    registry entries (`models`: name -> {family, source}) the numbers come from."""
    lines = [f"# {title}", "", "Written by the pipeline from `results/tables/`; intervals are 95 %.", ""]
    if models:
        lines += ["## Models", "", *_models(models), ""]
    for section, make in SECTIONS.items():
        if not tables.get(section):
            continue
        heading, table = make(tables[section])
        if section == "hla_adapt":
            heading = "HLA adaptation: accuracy by length, per adapted model and phase"
        lines += [f"## {heading}", "", *table, ""]
    return "\n".join(lines)


def write_summary(tables: dict, models: dict, path) -> None:
    Path(path).write_text(summarize(tables, models))
