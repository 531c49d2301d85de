"""Figures from tables and stores only; never touches a model.

One look for every figure: seaborn's paper theme, one colour per model (in registry order, so a model
keeps its colour in every figure), one colour per condition and per property, and every interval drawn
by `interval`. Importing this package applies the theme.

use_models  fix the model order colours follow (the plotting scripts pass the registry)
model_color, CONDITION_COLORS, PROPERTY_COLORS
interval    95 % interval bars, drawn the same way in every figure
weak_note   the caption of a rate too low for its effects to mean anything
model_panels  a figure with one column of panels per model, wrapped into rows of at most six models
"""

import matplotlib

matplotlib.use("Agg")

import seaborn as sns  # noqa: E402

sns.set_theme(
    context="paper",
    style="whitegrid",
    palette="colorblind",
    rc={
        "axes.titlesize": 8,
        "axes.labelsize": 8,
        "xtick.labelsize": 7,
        "ytick.labelsize": 7,
        "legend.fontsize": 7,
        "figure.titlesize": 9,
        "savefig.bbox": "tight",
        "savefig.dpi": 150,
    },
)
PALETTE = sns.color_palette("colorblind", 10)
_MODELS: list[str] = []

# The unedited model is always dark grey, the intervention under study blue, and controls the
# palette's remaining colours, so that a condition looks the same in every experiment's figure.
CONDITION_COLORS = {
    "intact": "0.3",
    "full": "0.3",
    "none": "0.3",
    "before": "0.3",
    "stitched": PALETTE[0],
    "address": PALETTE[0],
    "after": PALETTE[0],
    "hla": PALETTE[0],
    "shuffled_map": PALETTE[1],
    "fixed": PALETTE[1],
    "gdn_finetuned": PALETTE[1],
    "fixed_finetuned": PALETTE[2],
    "mean_write": PALETTE[2],
    "gdn": PALETTE[7],
    "converted": PALETTE[7],
    "control": PALETTE[7],
    "ablated": PALETTE[3],
    "zero": PALETTE[3],
    "mean": PALETTE[4],
    "blocked": PALETTE[3],
}
PROPERTY_COLORS = {"retrieval": PALETTE[0], "language": PALETTE[1], "persona": PALETTE[2]}

# A rate below this on the unedited model means the model does not do the task (an untrained toy, a
# random-weight real-shape checkpoint): effects measured on it are noise, and every figure says so.
WEAK = 0.2


def use_models(names) -> None:
    """Colour models in this order (the config's registry), whichever subset a figure shows."""
    _MODELS[:] = list(dict.fromkeys(names))


def model_color(name: str):
    if name not in _MODELS:
        _MODELS.append(name)
    return PALETTE[_MODELS.index(name) % len(PALETTE)]


def interval(ax, x, y, lo, hi, horizontal=False, **kwargs):
    """Interval bars around (x, y) from lo to hi (NaN bounds draw nothing), the same in every figure."""
    import numpy as np

    value = np.asarray(y if not horizontal else x, float)
    err = np.nan_to_num(np.abs(np.vstack([value - np.asarray(lo, float), np.asarray(hi, float) - value])))
    style = {"fmt": "none", "ecolor": "0.15", "elinewidth": 0.9, "capsize": 2, "zorder": 3} | kwargs
    return ax.errorbar(x, y, **({"xerr": err} if horizontal else {"yerr": err}), **style)


def weak_note(rate: float, what: str = "intact accuracy") -> str:
    """'(intact accuracy 0.00: not meaningful)' for a rate below WEAK, else ''."""
    return f"({what} {rate:.2f}: not meaningful)" if rate < WEAK else ""


def model_panels(n_models: int, rows: int = 1, width: float = 4.0, height: float = 3.3, max_cols: int = 6, **kw):
    """(figure, panels) where panels[model][row] is that model's row-th panel; models run left to right in
    blocks of at most `max_cols`, so a registry of every family still gives a figure one can read."""
    import math

    import matplotlib.pyplot as plt

    cols = min(n_models, max_cols)
    blocks = math.ceil(n_models / cols)
    fig, grid = plt.subplots(rows * blocks, cols, figsize=(width * cols, height * rows * blocks), squeeze=False, **kw)
    panels = [[grid[(i // cols) * rows + r][i % cols] for r in range(rows)] for i in range(n_models)]
    for i in range(n_models, blocks * cols):
        for r in range(rows):
            grid[(i // cols) * rows + r][i % cols].set_visible(False)
    return fig, panels
