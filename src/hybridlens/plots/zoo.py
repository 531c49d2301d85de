"""Toy-zoo figures.

plot_training   loss and batch accuracy against step, one line per model
plot_eval       held-out retrieval per format, language and persona fidelity, with Wilson intervals
eval_table      the evaluation rows of every model as one table with intervals
"""

import matplotlib.pyplot as plt
import pandas as pd

from hybridlens.plots import PALETTE, interval, model_color
from hybridlens.stats import wilson


def plot_training(curves: dict, path):
    fig, axes = plt.subplots(1, 2, figsize=(9, 3.4))
    for name, df in curves.items():
        logged = df[df["step"].diff().fillna(1) > 0]  # a validation row repeats its step
        axes[0].plot(logged["step"], logged["loss"], color=model_color(name), label=name)
        axes[1].plot(logged["step"], logged["accuracy"].rolling(4, min_periods=1).mean(), color=model_color(name))
        if "validation" in df:
            v = df.dropna(subset=["validation"])
            axes[1].plot(v["step"], v["validation"], "o", ms=3, color=model_color(name))
    axes[0].set(xlabel="step", ylabel="training loss", yscale="log", title="loss on every target")
    axes[1].set(xlabel="step", ylabel="answer accuracy", ylim=(0, 1.02))
    axes[1].set_title("batch accuracy on every answer (lines); greedy validation retrieval (dots)")
    fig.legend(*axes[0].get_legend_handles_labels(), loc="center left", bbox_to_anchor=(1.0, 0.5), frameon=False)
    fig.tight_layout()
    fig.savefig(path)
    plt.close(fig)


def eval_table(evals: dict) -> pd.DataFrame:
    rows = []
    for name, ev in evals.items():
        for r in ev["rows"]:
            for metric in ("retrieval", "language", "persona"):
                lo, hi = wilson(r[metric] * r["n"], r["n"])
                rows.append(
                    {
                        "model": name,
                        "format": r["format"],
                        "n_pairs": r["n_pairs"],
                        "n": r["n"],
                        "metric": metric,
                        "gate": ev["gate"],
                        "value": r[metric],
                        "ci_lo": lo,
                        "ci_hi": hi,
                    }
                )
    return pd.DataFrame(rows)


def plot_eval(table: pd.DataFrame, path):
    metrics = ["retrieval", "language", "persona"]
    models = list(dict.fromkeys(table["model"]))
    formats = list(dict.fromkeys(table["format"]))
    fig, axes = plt.subplots(1, 3, figsize=(12, 0.45 * len(models) + 1.8), sharey=True)
    for ax, metric in zip(axes, metrics, strict=True):
        sub = table[table["metric"] == metric]
        for j, fmt in enumerate(formats):
            # A toy is evaluated on chat, list and rev and on the formats it trained on, so each format has its
            # own set of models; the formats share a model's row, side by side.
            d = sub[sub["format"] == fmt].set_index("model")
            d = d.loc[[m for m in models if m in d.index]]
            offset = (j - (len(formats) - 1) / 2) * min(0.25, 0.7 / max(len(formats) - 1, 1))
            y = [models.index(m) + offset for m in d.index]
            ax.plot(d["value"], y, "o", ms=4, color=PALETTE[j], label=fmt)
            interval(ax, d["value"], y, d["ci_lo"], d["ci_hi"], horizontal=True)
        if metric == "retrieval":  # each model's gate (0 = not gated)
            gates = sub.drop_duplicates("model").set_index("model").loc[models, "gate"]
            for i, g in enumerate(gates):
                if g > 0:
                    ax.plot([g, g], [i - 0.45, i + 0.45], color="grey", ls="--", lw=1)
        ax.set(title=f"held-out {metric} (95 % Wilson)", xlim=(-0.02, 1.02))
    # Models are evaluated at their own dictionary size (the sweep sizes at 4 pairs, the others at 8).
    pairs = table.drop_duplicates("model").set_index("model").loc[models, "n_pairs"]
    axes[0].set_yticks(range(len(models)), [f"{m} ({p} pairs)" for m, p in pairs.items()])
    axes[0].invert_yaxis()
    axes[0].legend(title="format")
    fig.tight_layout()
    fig.savefig(path)
    plt.close(fig)
