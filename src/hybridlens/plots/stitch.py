"""Cross-architecture stitching figure.

plot_stitch  per direction (donor -> receiver): each transfer's measure under the stitched maps and the controls
"""

import matplotlib.pyplot as plt
import numpy as np
import pandas as pd

from hybridlens.plots import WEAK, weak_note

TRANSFER_LABELS = {
    "query": "query vector\n(redirect to A)",
    "address": "Address swap\n(accuracy)",
    "encode_address": "Encode+Address swap\n(accuracy)",
}
CONDITION_STYLE = {
    "intact": ("intact receiver", "0.25"),
    "stitched": ("donor block via ridge maps", "tab:blue"),
    "shuffled_map": ("shuffled maps", "tab:orange"),
    "mean_write": ("receiver's mean write", "tab:green"),
    "ablated": ("block ablated", "tab:red"),
}


def plot_stitch(summary: pd.DataFrame, path):
    directions = list(dict.fromkeys(zip(summary["donor"], summary["receiver"], strict=True)))
    fig, axes = plt.subplots(1, len(directions), figsize=(5.2 * len(directions), 4.0), squeeze=False)
    width = 0.8 / len(CONDITION_STYLE)
    for ax, (donor, receiver) in zip(axes[0], directions, strict=True):
        d = summary[(summary["donor"] == donor) & (summary["receiver"] == receiver)]
        d = d.set_index(["transfer", "condition"])
        transfers = [t for t in TRANSFER_LABELS if t in d.index.get_level_values(0)]
        x = np.arange(len(transfers))
        for j, (condition, (name, color)) in enumerate(CONDITION_STYLE.items()):
            r = d.loc[[(t, condition) for t in transfers]]
            err = np.vstack([r["rate"] - r["lo"], r["hi"] - r["rate"]])
            offset = (j - (len(CONDITION_STYLE) - 1) / 2) * width
            ax.bar(x + offset, r["rate"], width, yerr=err, capsize=2, color=color, label=name)
        ax.set_xticks(x, [TRANSFER_LABELS[t] for t in transfers], fontsize=7)
        ax.set_ylim(0, 1.05)
        n = int(d["n"].iloc[0])
        title = f"{donor} → {receiver}\n(test-split keys, {n} items, 95% bootstrap CI)"
        intact = d.loc[("address", "intact"), "rate"]
        if intact < WEAK:  # a receiver that does not retrieve has nothing to restore
            title += "\n" + weak_note(intact, "receiver's intact accuracy")
        ax.set_title(title, fontsize=8)
        ax.set_ylabel("rate", fontsize=8)
    handles, labels = axes[0][0].get_legend_handles_labels()
    fig.legend(handles, labels, fontsize=7, loc="lower center", ncol=len(labels), frameon=False)
    fig.tight_layout(rect=(0, 0.07, 1, 1))
    fig.savefig(path)
    plt.close(fig)
