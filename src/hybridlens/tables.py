"""Tables as the pipeline writes them: CSV or TSV files that always read back with pandas.

write_table   rows -> file; no rows: the header and one row whose `reason` column says why there are none
"""

import pandas as pd


def write_table(path, rows, columns, reason: str, sep=","):
    """`columns` are the table's columns when it has no rows; `reason` says why, in the file itself, and
    travels into the tables combined from it."""
    empty = pd.DataFrame([{"reason": reason}], columns=[*columns, "reason"])
    (pd.DataFrame(rows) if len(rows) else empty).to_csv(path, sep=sep, index=False)
