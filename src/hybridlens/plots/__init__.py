"""Figures from tables and stores only; never touches a model."""

import matplotlib

matplotlib.use("Agg")

# A rate below this on the unedited model means the model does not do the task (an untrained toy, a
# random-weight real-shape checkpoint): effects measured on it are noise, and every figure says so.
WEAK = 0.2


def weak_note(rate: float, what: str = "intact accuracy") -> str:
    """'(intact accuracy 0.00: not meaningful)' for a rate below WEAK, else ''."""
    return f"({what} {rate:.2f}: not meaningful)" if rate < WEAK else ""
