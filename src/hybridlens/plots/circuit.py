"""Encode–Address circuit figure.

plot_circuit  per model: accuracy with each group ablated, and the transplant redirect rate per condition
"""

import matplotlib.pyplot as plt
import numpy as np
import pandas as pd

from hybridlens.plots import CONDITION_COLORS, WEAK, interval, model_panels, weak_note

# Conditions in reading order: the Address block's transplants, then the controls.
CONDITIONS = [
    ("query", "address", "same_dict", "final"),
    ("query", "address", "same_dict", "question"),
    ("query", "address", "same_dict", "all"),
    ("state", "address", "same_dict", "final"),
    ("query", "address", "same_dict", "dict"),
    ("query", "control_group", "same_dict", "final"),
    ("state", "control_group", "same_dict", "final"),
    ("query", "address", "other_dict", "final"),
    ("state", "address", "other_dict", "final"),
]


def label(kind, block, donor, positions):
    what = "query@" + positions if kind == "query" else "state"
    where = "" if block == "address" else " (other group)"
    return what + where + (" other dict" if donor == "other_dict" else "")


def plot_circuit(localization: pd.DataFrame, ablation: pd.DataFrame, transplant: pd.DataFrame, path):
    """The circuit figure from its tables (circuit_localization, circuit_ablation, circuit_transplant)."""
    models = list(localization["model"])
    fig, panels = model_panels(len(models), rows=2, width=4.0, height=3.3)
    for col, model in enumerate(models):
        c = localization.set_index("model").loc[model]
        ax = panels[col][0]
        a = ablation[ablation["model"] == model]
        groups = list(dict.fromkeys(a["layers"].astype(str)))
        x = np.arange(len(groups))
        for j, mode in enumerate(("zero", "mean")):
            m = a[a["mode"] == mode].set_index(a[a["mode"] == mode]["layers"].astype(str)).loc[groups]
            at = x + (j - 0.5) * 0.4
            ax.bar(at, m["accuracy"], 0.4, color=CONDITION_COLORS[mode], label=f"{mode}-ablated")
            interval(ax, at, m["accuracy"], m["accuracy_lo"], m["accuracy_hi"])
        ax.axhline(c["intact_accuracy"], color=CONDITION_COLORS["intact"], lw=0.8, ls="--", label="intact")
        ax.set_xticks(x, [f"G{i}\nL{g}" for i, g in enumerate(groups)])
        ax.set_ylim(0, 1.05)
        address = "none before the reader" if pd.isna(c["address_group"]) else f"G{int(c['address_group'])}"
        reader = f"L{c['reader_layer']}.h{c['reader_head']}"
        title = f"{model}\nEncode G{c['encode_group']}, Address {address}, reader {reader}"
        if c["intact_accuracy"] < WEAK:  # a model that does not retrieve has no circuit to find
            title += "\n" + weak_note(c["intact_accuracy"])
        ax.set_title(title)
        ax.set_ylabel("retrieval accuracy")
        ax = panels[col][1]
        t = transplant[transplant["model"] == model].set_index(["kind", "block", "donor", "positions"])
        conds = [k for k in CONDITIONS if k in t.index]
        if conds:
            r = t.loc[conds]
            colours = [
                CONDITION_COLORS[
                    "address" if k[1] == "address" and k[2] == "same_dict" and k[3] != "dict" else "control"
                ]
                for k in conds
            ]
            y = np.arange(len(conds))
            ax.barh(y, r["redirect"], color=colours)
            interval(ax, r["redirect"], y, r["redirect_lo"], r["redirect_hi"], horizontal=True)
            ax.set_yticks(y, [label(*k) for k in conds])
            ax.invert_yaxis()
        ax.set_xlim(0, 1.05)
        ax.set_xlabel("redirect rate (host answers the donor's key)")
    panels[min(len(models), 6) - 1][0].legend(loc="upper left", bbox_to_anchor=(1.02, 1.0), frameon=False)
    fig.suptitle("Encode–Address circuit: ablation (top), transplants and controls (bottom); 95 % bootstrap")
    fig.tight_layout()
    fig.savefig(path)
    plt.close(fig)
