"""Split-prefill figures.

plot_retention   per model: retention of retrieval / language / persona under each cache condition
plot_state_swap  per model and style channel: state-swap outputs by content source x style source
"""

import matplotlib.pyplot as plt
import numpy as np
import pandas as pd
import seaborn as sns

from hybridlens.plots import PROPERTY_COLORS, WEAK, interval, model_panels, weak_note

PROPERTIES = ("retrieval", "language", "persona")
# experiments.split_prefill's SOURCES and CONTENT_SOURCES, as the figure labels them.
SOURCES = {"A": "A (KV)", "B": "B (state)", "other": "other", "none": "none"}
CONTENTS = {
    "A": "A's value (KV)",
    "A_related": "A's, other language",
    "B": "B's value (state)",
    "B_related": "B's, other language",
    "A_dict": "A, other fact",
    "B_dict": "B, other fact",
    "other": "in neither",
    "none": "no value",
}


def plot_retention(table: pd.DataFrame, path):
    models = list(dict.fromkeys(table["model"]))
    conditions = [c for c in dict.fromkeys(table["condition"]) if c != "full"]
    fig, panels = model_panels(len(models), width=4.2, height=3.4, sharey=True)
    width = 0.8 / len(PROPERTIES)
    for (ax,), model in zip(panels, models, strict=True):
        t = table[table["model"] == model].set_index(["condition", "property"])
        x = np.arange(len(conditions))
        full = t.xs("full", level="condition")["metric"]
        for j, prop in enumerate(PROPERTIES):
            rows = t.loc[[(c, prop) for c in conditions]]
            at = x + (j - 1) * width
            # A ratio to a full-cache rate near zero says nothing: drawn hatched and faint.
            weak = full[prop] < WEAK
            style = {"alpha": 0.3, "hatch": "//"} if weak else {}
            ax.bar(at, rows["retention"], width, color=PROPERTY_COLORS[prop], label=prop, **style)
            interval(ax, at, rows["retention"], rows["retention_lo"], rows["retention_hi"])
        title = f"{model}\nfull cache: " + ", ".join(f"{p[:4]} {full[p]:.2f}" for p in PROPERTIES)
        if full.max() < WEAK:  # no property survives even the full cache: the model does not do the task
            title += "\n" + weak_note(full.max(), "best full-cache rate")
        ax.set_title(title)
        ax.set_xticks(x, [c.replace("_", "\n") for c in conditions])
        ax.axhline(1, color="grey", lw=0.6, ls="--")
        ax.set_ylim(0, 1.3)
    panels[0][0].set_ylabel("retention (metric / full cache)")
    panels[0][0].legend(loc="upper left", ncol=3)
    fig.suptitle(f"What survives in each memory channel (95 % bootstrap intervals; hatched: full-cache rate < {WEAK})")
    fig.tight_layout()
    fig.savefig(path)
    plt.close(fig)


def plot_state_swap(table: pd.DataFrame, path):
    models = list(dict.fromkeys(table["model"]))
    styles = ("language", "persona")
    fig, panels = model_panels(len(models), rows=len(styles), width=4.2, height=4.0)
    for col, model in enumerate(models):
        for row, style in enumerate(styles):
            t = table[(table["model"] == model) & (table["style"] == style)]
            m = t.pivot(index="content_source", columns="style_source", values="fraction")
            m = m.reindex(index=list(CONTENTS), columns=list(SOURCES))
            m.index, m.columns = list(CONTENTS.values()), list(SOURCES.values())
            ax = panels[col][row]
            sns.heatmap(m.astype(float), vmin=0, vmax=1, cmap="Blues", annot=True, fmt=".2f", cbar=False, ax=ax)
            ax.set_xlabel(f"{style} from")
            ax.set_ylabel("content (value) from")
            if row == 0:
                ax.set_title(model)
    fig.suptitle("State-swap: KV cache of context A, recurrent states of context B")
    fig.tight_layout()
    fig.savefig(path)
    plt.close(fig)
