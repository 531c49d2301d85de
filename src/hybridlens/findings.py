"""A study's findings.md: its claims, sentences whose numbers are placeholders, filled from the run's tables.

tables  the result files a claims template reads (the findings rule's inputs)
render  the template with every placeholder replaced by the number its table holds

A placeholder is `{{ FILE | FILTERS | COLUMN }}`: FILE a table under results/ (tab-separated), FILTERS
`column=value` pairs joined by commas (or nothing), COLUMN a column name, or an aggregate over the rows the
filters select: `min(C)`, `max(C)`, `mean(C)`, `sum(C)`, `count(C>=X)` (how many rows have C at least X,
"k of n"). A bare column must select exactly one row; its value is written with its interval where the table
has one (`C_lo`/`C_hi`, or `ci_lo`/`ci_hi` beside `value`; `C [LO, HI]` names other interval columns), as in
summary.md. Nothing is computed but selections and these aggregates.
"""

import numbers
import re
from pathlib import Path

import pandas as pd

from hybridlens.errors import UserError

PLACEHOLDER = re.compile(r"\{\{\s*([^|}]+?)\s*\|\s*([^|}]*?)\s*\|\s*([^|}]+?)\s*\}\}")
AGGREGATE = re.compile(r"^(min|max|mean|sum)\(([\w.]+)\)$|^count\(([\w.]+)>=([-\d.e]+)\)$")
INTERVAL = re.compile(r"^([\w.]+)\s*\[\s*(\w+)\s*,\s*(\w+)\s*\]$")


def tables(template: str) -> list[str]:
    """The results/ files `template` reads, in order of first use."""
    return list(dict.fromkeys(f"results/{m.group(1)}" for m in PLACEHOLDER.finditer(template)))


def _number(x) -> str:
    return str(int(x)) if isinstance(x, numbers.Integral) else f"{x:.3f}"


def _filters(text: str) -> dict:
    pairs = [p.split("=", 1) for p in text.split(",") if p.strip()]
    if any(len(p) != 2 for p in pairs):
        raise ValueError(f"filters {text!r} are not column=value pairs")
    return {k.strip(): v.strip() for k, v in pairs}


def _fill(match, read) -> str:
    path, filters, column = match.groups()
    table = read(f"results/{path}")
    rows = table
    for key, value in _filters(filters).items():
        if key not in table:
            raise ValueError(f"{path} has no column {key}")
        rows = rows[rows[key].astype(str) == value]
    aggregate = AGGREGATE.match(column)
    if aggregate:
        how, col, counted, at_least = aggregate.groups()
        if counted:
            return f"{int((rows[counted] >= float(at_least)).sum())} of {len(rows)}"
        return _number(getattr(rows[col], how)()) if len(rows) else "–"
    if len(rows) != 1:
        raise ValueError(f"{len(rows)} rows of {path} match {filters or 'no filter'}; a bare column needs one")
    row = rows.iloc[0]
    named = INTERVAL.match(column)
    intervals = [named.groups()[1:]] if named else [(f"{column}_lo", f"{column}_hi")]
    column = named.group(1) if named else column
    intervals += [("ci_lo", "ci_hi")] if column == "value" else []
    value = row[column]
    if pd.isna(value):
        return "–"
    for lo, hi in intervals:
        if lo in row and not pd.isna(row[lo]):
            return f"{value:.3f} [{row[lo]:.3f}, {row[hi]:.3f}]"
    return _number(value) if isinstance(value, numbers.Number) else str(value)


def render(template: str, root=".", where: str = "claims.md") -> str:
    """`template` with its placeholders filled from the tables under `root`; a placeholder that does not
    select what it should raises UserError naming it."""
    cache = {}

    def read(path):
        if path not in cache:
            cache[path] = pd.read_csv(Path(root) / path, sep="\t")
        return cache[path]

    def fill(match):
        try:
            return _fill(match, read)
        except (ValueError, KeyError) as err:
            raise UserError(f"{where}: {match.group(0)}: {err}; fix the placeholder") from err

    return PLACEHOLDER.sub(fill, template)
