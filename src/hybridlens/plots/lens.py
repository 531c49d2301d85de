"""Logit-lens figure.

lens_summary     per model and layer: median residual norm, median answer rank with quartiles, top-1 rate
plot_logit_lens  one panel per model: residual norm and answer rank by layer, attention layers marked
"""

import matplotlib.pyplot as plt
import pandas as pd

from hybridlens.plots import PALETTE, WEAK, model_panels, weak_note
from hybridlens.stats import wilson


def lens_summary(frames: dict) -> pd.DataFrame:
    rows = []
    for model, df in frames.items():
        for (layer, kind), g in df.groupby(["layer", "kind"], sort=True):
            top1 = int((g["answer_rank"] == 1).sum())
            lo, hi = wilson(top1, len(g))
            rows.append(
                {
                    "model": model,
                    "layer": layer,
                    "kind": kind,
                    "n": len(g),
                    "resid_norm": g["resid_norm"].median(),
                    "rank_median": g["answer_rank"].median(),
                    "rank_q1": g["answer_rank"].quantile(0.25),
                    "rank_q3": g["answer_rank"].quantile(0.75),
                    "top1": top1 / len(g),
                    "top1_lo": lo,
                    "top1_hi": hi,
                }
            )
    return pd.DataFrame(rows)


def plot_logit_lens(summary: pd.DataFrame, path):
    models = list(dict.fromkeys(summary["model"]))
    fig, panels = model_panels(len(models), width=3.6, height=3.2)
    for (ax,), model in zip(panels, models, strict=True):
        d = summary[summary["model"] == model]
        for _, r in d[d["kind"].isin(["attention", "parallel"])].iterrows():
            ax.axvspan(r["layer"] - 0.4, r["layer"] + 0.4, color=PALETTE[1], alpha=0.15, lw=0)
        ax.plot(d["layer"], d["rank_median"], "o-", color=PALETTE[0], label="answer rank (median)")
        ax.fill_between(d["layer"], d["rank_q1"], d["rank_q3"], color=PALETTE[0], alpha=0.2)
        final_top1 = d.sort_values("layer")["top1"].iloc[-1]
        title = model if final_top1 >= WEAK else f"{model}\n{weak_note(final_top1, 'final top-1')}"
        ax.set(yscale="log", xlabel="layer (shaded: attention / parallel)", title=title)
        ax.set_ylabel("answer's rank under the unembedding\n(median, quartiles shaded)", color=PALETTE[0])
        twin = ax.twinx()
        twin.grid(False)
        twin.plot(d["layer"], d["resid_norm"], "s--", color=PALETTE[2], ms=3)
        twin.set_ylabel("residual norm (median)", color=PALETTE[2])
    fig.tight_layout()
    fig.savefig(path)
    plt.close(fig)
