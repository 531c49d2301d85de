"""HLA figures.

length_table  accuracy per mode, task (and macro over tasks) and length, pooled over seeds, with intervals
plot_length   accuracy against context length per mode: macro panel and one panel per task
plot_adapt    macro accuracy by length before and after adapting a pretrained model to HLA
"""

import matplotlib.pyplot as plt
import numpy as np
import pandas as pd

from hybridlens.plots import WEAK, weak_note
from hybridlens.stats import bootstrap, wilson

COLOURS = {"gdn": "#555555", "fixed": "#e08a00", "hla": "#1b6ca8"}


def length_table(rows: pd.DataFrame) -> pd.DataFrame:
    out = []
    for (mode, task, length), g in rows.groupby(["mode", "task", "length"], sort=True):
        lo, hi = wilson(g["correct"].sum(), g["answers"].sum())
        out.append(
            {
                "mode": mode,
                "task": task,
                "length": length,
                "seeds": g["seed"].nunique(),
                "accuracy": g["correct"].sum() / g["answers"].sum(),
                "lo": lo,
                "hi": hi,
            }
        )
    # Macro average over tasks per seed, then an interval over seeds.
    acc = rows.assign(acc=rows["correct"] / rows["answers"]).groupby(["mode", "length", "seed"])["acc"].mean()
    for (mode, length), g in acc.groupby(level=["mode", "length"]):
        lo, hi = bootstrap(g.to_numpy()) if len(g) > 1 else (np.nan, np.nan)
        out.append(
            {"mode": mode, "task": "macro", "length": length, "seeds": len(g), "accuracy": g.mean(), "lo": lo, "hi": hi}
        )
    return pd.DataFrame(out)


def plot_adapt(table: pd.DataFrame, path):
    """Macro accuracy by length for each adapted model: before, right after conversion, after fine-tuning."""
    macro = table[table["task"] == "macro"]
    fig, ax = plt.subplots(figsize=(4.6, 3.2))
    styles = {
        "before": ("#555555", "o"),
        "gdn_finetuned": ("#e08a00", "^"),
        "converted": ("#999999", "x"),
        "after": ("#1b6ca8", "s"),
    }
    for name in dict.fromkeys(macro["mode"]):
        model, phase = name.split(":")
        t = macro[macro["mode"] == name].sort_values("length")
        colour, marker = styles.get(phase, (None, "o"))
        label = f"{model} {phase}"
        if phase == "before" and t["accuracy"].max() < WEAK:  # the model does not do the task to begin with
            label += " " + weak_note(t["accuracy"].max(), "best")
        ax.plot(t["length"], t["accuracy"], marker=marker, color=colour, label=label)
    ax.set_xscale("log", base=2)
    ax.set_ylim(0, 1.02)
    ax.set_xlabel("context length")
    ax.set_ylabel("macro answer accuracy")
    ax.legend(fontsize=7)
    ax.set_title("GDN -> HLA: before, converted (gates ~1), fine-tuned; control: GDN fine-tuned alike", fontsize=7)
    fig.tight_layout()
    fig.savefig(path)
    plt.close(fig)


def plot_length(table: pd.DataFrame, path):
    tasks = ["macro"] + sorted(t for t in table["task"].unique() if t != "macro")
    cols = 4
    rows = -(-len(tasks) // cols)
    fig, axes = plt.subplots(rows, cols, figsize=(3.2 * cols, 2.6 * rows), squeeze=False, sharex=True)
    for ax, task in zip(axes.flat, tasks, strict=False):
        for mode in dict.fromkeys(table["mode"]):
            t = table[(table["task"] == task) & (table["mode"] == mode)].sort_values("length")
            ax.errorbar(
                t["length"],
                t["accuracy"],
                yerr=np.nan_to_num(np.abs([t["accuracy"] - t["lo"], t["hi"] - t["accuracy"]])),
                marker="o",
                ms=3,
                capsize=2,
                label=mode,
                color=COLOURS.get(mode),
            )
        ax.set_xscale("log", base=2)
        ax.set_ylim(0, 1.02)
        ax.set_title(task, fontsize=8)
    for ax in axes.flat[len(tasks) :]:
        ax.axis("off")
    axes[0][0].legend(fontsize=7)
    axes[0][0].set_ylabel("answer accuracy")
    fig.suptitle("Long-context recall by length: trained at the first length, evaluated up to 8x", fontsize=9)
    fig.tight_layout()
    fig.savefig(path)
    plt.close(fig)
