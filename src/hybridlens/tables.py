"""Tables as the pipeline writes them: CSV or TSV files that always read back with pandas, sealed with
the sha256 of what their rule wrote.

write_table   rows -> file; no rows: the header and one row whose `reason` column says why there are none
gather        one table from per-model files results/<experiment>/<model>/<file>, the model named in a column
seal          record a finished job's table beside it (.NAME.provenance: its sha256, the rule, its wildcards)
changed       every sealed table under a directory whose bytes are no longer what its rule wrote
refuse_changed  raise UserError naming the first changed table, before any job reads it
"""

import json
from pathlib import Path

import pandas as pd

SEALED = (".csv", ".tsv", ".json")  # what later rules read back; HDF5 stores carry their own checksums


def write_table(path, rows, columns, reason: str, sep=","):
    """`columns` are the table's columns when it has no rows; `reason` says why, in the file itself, and
    travels into the tables combined from it."""
    empty = pd.DataFrame([{"reason": reason}], columns=[*columns, "reason"])
    (pd.DataFrame(rows) if len(rows) else empty).to_csv(path, sep=sep, index=False)


def gather(paths, read=pd.read_csv, **kwargs) -> pd.DataFrame:
    """The per-model files `paths` (results/<experiment>/<model>/<file>) as one table whose last column,
    `model`, is each file's model, read from its directory: a table says which model each row is of, rather
    than a script pairing files with names by their order."""
    return pd.concat([read(path, **kwargs).assign(model=Path(path).parent.name) for path in paths])


def _record(path: Path) -> Path:
    return path.with_name(f".{path.name}.provenance")


def seal(path, rule: str, wildcards: dict) -> None:
    """Write `path`'s provenance: its sha256 and the job that wrote it."""
    from hybridlens.models.source import file_sha256

    path = Path(path)
    record = {"sha256": file_sha256(path), "rule": rule, "wildcards": wildcards}
    _record(path).write_text(json.dumps(record, sort_keys=True) + "\n")


def changed(root="results") -> list[str]:
    """One line per sealed table under `root` whose bytes differ from what its rule wrote, with the command
    that rebuilds it; a table since deleted is not listed (the run rebuilds it anyway)."""
    from hybridlens.models.source import file_sha256

    lines = []
    for record in sorted(Path(root).rglob(".*.provenance")):
        table = record.with_name(record.name[1 : -len(".provenance")])
        try:
            written = json.loads(record.read_text())
        except (json.JSONDecodeError, UnicodeDecodeError):
            written = {"sha256": None, "rule": "?"}
        if table.is_file() and file_sha256(table) != written.get("sha256"):
            lines.append(
                f"{table} is not what rule {written.get('rule', '?')} wrote (its sha256 differs from "
                f"{record.name}), and every result read from it would follow; rebuild it (rm {table}, then run "
                f"again) or, to keep your edit, remove {record}"
            )
    return lines


def refuse_changed(root="results") -> None:
    """Refuse a run whose sealed tables changed since their jobs wrote them: their readers would fail on one,
    or copy a changed number into every table built from it."""
    from hybridlens.errors import UserError

    found = changed(root)
    if found:
        more = f" (and {len(found) - 1} more changed tables)" if len(found) > 1 else ""
        raise UserError(found[0] + more)
