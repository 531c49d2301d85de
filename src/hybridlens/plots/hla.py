"""HLA figures.

length_table  accuracy per mode, task (and macro over tasks) and length, pooled over seeds, with intervals
plot_length   accuracy against context length per mode: macro panel and one panel per task
plot_adapt    macro accuracy by length before and after adapting a pretrained model to HLA
ruler_table   RULER's mean score per adapted model, phase, task and length, and its macro over tasks
"""

import matplotlib.pyplot as plt
import numpy as np
import pandas as pd

from hybridlens.plots import CONDITION_COLORS, WEAK, interval, weak_note
from hybridlens.stats import bootstrap, wilson

MODES = {"gdn": "GDN", "fixed": "fixed chunk mixing", "hla": "HLA"}
PHASES = {
    "before": "before",
    "converted": "converted to HLA",
    "after": "HLA fine-tuned",
    "gdn_finetuned": "GDN fine-tuned (control)",
    "fixed_finetuned": "fixed chunk mixing fine-tuned (control)",
}


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
    table = pd.DataFrame(out)
    # Which router each chunk-mixing model used ("" for GDN and fixed mixing), as its rows said.
    routers = rows.get("router", pd.Series("", index=rows.index)).fillna("").groupby(rows["mode"]).first()
    return table.assign(router=table["mode"].map(routers).fillna(""))


def ruler_table(rows: pd.DataFrame) -> pd.DataFrame:
    """Rows (model, phase, task, length) -> mean score and prompts; task "macro" is the mean over tasks, as
    RULER reports one score per length."""
    keys = ["model", "phase", "task", "length"]
    per_task = rows.groupby(keys, sort=False)["score"].agg(score="mean", prompts="size").reset_index()
    macro = per_task.groupby(["model", "phase", "length"], sort=False)
    macro = macro.agg(score=("score", "mean"), prompts=("prompts", "sum")).reset_index().assign(task="macro")
    return pd.concat([macro[per_task.columns], per_task], ignore_index=True)


def plot_adapt(table: pd.DataFrame, path):
    """Macro accuracy by length for each adapted model: before, right after conversion, after fine-tuning."""
    macro = table[table["task"] == "macro"]
    fig, ax = plt.subplots(figsize=(5.6, 3.4))
    markers = {"before": "o", "gdn_finetuned": "^", "fixed_finetuned": "v", "converted": "x", "after": "s"}
    models = list(dict.fromkeys(n.split(":")[0] for n in macro["mode"]))
    lines = {m: ["-", "--", ":", "-."][k % 4] for k, m in enumerate(models)}
    for name in dict.fromkeys(macro["mode"]):
        model, phase = name.split(":")
        t = macro[macro["mode"] == name].sort_values("length")
        colour = CONDITION_COLORS.get(phase)
        marker = markers.get(phase, "o")
        label = f"{model}: {PHASES.get(phase, phase)}"
        if phase == "before" and t["accuracy"].max() < WEAK:  # the model does not do the task to begin with
            label += " " + weak_note(t["accuracy"].max(), "best")
        ax.plot(t["length"], t["accuracy"], marker=marker, ls=lines[model], color=colour, label=label)
        interval(ax, t["length"], t["accuracy"], t["lo"], t["hi"])
    ax.set_xscale("log", base=2)
    ax.set_ylim(0, 1.02)
    ax.set_xlabel("context length (tokens)")
    ax.set_ylabel("macro answer accuracy")
    ax.legend(loc="center left", bbox_to_anchor=(1.02, 0.5), frameon=False)
    ax.set_title("Adapting a trained model's GDN layers to HLA")
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
            ax.plot(
                t["length"], t["accuracy"], marker="o", ms=3, label=MODES.get(mode, mode), color=CONDITION_COLORS[mode]
            )
            interval(ax, t["length"], t["accuracy"], t["lo"], t["hi"])
        ax.set_xscale("log", base=2)
        ax.set_ylim(0, 1.02)
        ax.set_title(task.replace("_", " "))
    for ax in axes.flat[len(tasks) :]:
        ax.axis("off")
    axes[0][0].legend()
    for ax in axes[:, 0]:
        ax.set_ylabel("answer accuracy")
    for ax in axes[-1]:
        ax.set_xlabel("context length (tokens)")
    fig.suptitle("Long-context recall by length: trained at the first length, evaluated up to 8x; 95 % intervals")
    fig.tight_layout()
    fig.savefig(path)
    plt.close(fig)
