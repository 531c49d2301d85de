"""Cross-architecture stitching figure.

plot_stitch  per direction (donor -> receiver): each transfer's measure under the stitched maps and the controls
"""

import matplotlib.pyplot as plt
import numpy as np
import pandas as pd

from hybridlens.plots import CONDITION_COLORS, WEAK, interval, weak_note

TRANSFER_LABELS = {
    "query": "query vector\n(redirect to A)",
    "address": "Address swap\n(accuracy)",
    "encode_address": "Encode+Address swap\n(accuracy)",
}
CONDITION_LABELS = {
    "intact": "intact receiver",
    "stitched": "donor block via ridge maps",
    "shuffled_map": "shuffled maps",
    "mean_write": "receiver's mean write (per role)",
    "ablated": "block ablated",
}


def plot_stitch(summary: pd.DataFrame, path):
    directions = list(dict.fromkeys(zip(summary["donor"], summary["receiver"], strict=True)))
    fig, axes = plt.subplots(1, len(directions), figsize=(5.2 * len(directions), 4.0), squeeze=False)
    width = 0.8 / len(CONDITION_LABELS)
    for ax, (donor, receiver) in zip(axes[0], directions, strict=True):
        d = summary[(summary["donor"] == donor) & (summary["receiver"] == receiver)]
        d = d.set_index(["transfer", "condition"])
        transfers = [t for t in TRANSFER_LABELS if t in d.index.get_level_values(0)]
        x = np.arange(len(transfers))
        for j, (condition, name) in enumerate(CONDITION_LABELS.items()):
            r = d.loc[[(t, condition) for t in transfers]]
            at = x + (j - (len(CONDITION_LABELS) - 1) / 2) * width
            ax.bar(at, r["rate"], width, color=CONDITION_COLORS[condition], label=name)
            interval(ax, at, r["rate"], r["lo"], r["hi"])
        ax.set_xticks(x, [TRANSFER_LABELS[t] for t in transfers])
        ax.set_ylim(0, 1.05)
        n = int(d["n"].iloc[0])
        title = f"{donor} → {receiver}\n(test-split keys, {n} items, 95% bootstrap CI)"
        intact = d.loc[("address", "intact"), "rate"]
        if intact < WEAK:  # a receiver that does not retrieve has nothing to restore
            title += "\n" + weak_note(intact, "receiver's intact accuracy")
        ax.set_title(title)
        ax.set_ylabel("rate")
    handles, labels = axes[0][0].get_legend_handles_labels()
    fig.legend(handles, labels, loc="lower center", ncol=len(labels), frameon=False)
    fig.tight_layout(rect=(0, 0.07, 1, 1))
    fig.savefig(path)
    plt.close(fig)
