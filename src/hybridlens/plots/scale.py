"""Scale-sweep figures; every one takes the tables across sizes (smallest first) and an output path.

redirect       size × group heatmap of the final-position group transplant's redirect rate
removal        size × group heatmaps of removal effects: accuracy, D and main-reader attention, relative to intact
chain          the largest size: group sets (singles, pairs, runs) and earlier attention layers with every reader's
               attention, and blocking
groups_needed  groups needed to redirect >= threshold against model size
"""

import matplotlib.pyplot as plt
import numpy as np

from hybridlens.plots import CONDITION_COLORS, PALETTE, WEAK, interval, weak_note


def _size_label(row):
    label = f"{row['model']}\n{row['layers']}L·d{row['hidden_size']}·{row['parameters'] / 1e6:.2f}M"
    if row["intact_accuracy"] < WEAK:
        label += "\n" + weak_note(row["intact_accuracy"], "intact")
    return label


def _grid(sizes, table, column, value):
    """[size, group] matrix of `value` for single groups G0..Gn (NaN where a size has fewer groups)."""
    n = max(len(str(g).split()) for g in sizes["groups"])
    grid = np.full((len(sizes), n), np.nan)
    for i, model in enumerate(sizes["model"]):
        t = table[table["model"] == model].set_index(column)
        for g in range(n):
            if f"G{g}" in t.index:
                grid[i, g] = t.loc[f"G{g}", value]
    return grid


def _heatmap(ax, grid, sizes, title, vmin=0.0, vmax=1.0, cmap="viridis"):
    im = ax.imshow(grid, vmin=vmin, vmax=vmax, cmap=cmap, aspect="auto")
    ax.grid(False)
    for (i, j), v in np.ndenumerate(grid):
        if np.isfinite(v):
            ax.text(j, i, f"{v:.2f}", ha="center", va="center", fontsize=6, color="white" if v < 0.5 else "black")
    ax.set_xticks(range(grid.shape[1]), [f"G{g}" for g in range(grid.shape[1])], fontsize=7)
    ax.set_yticks(range(len(sizes)), [_size_label(r) for _, r in sizes.iterrows()], fontsize=6)
    ax.set_title(title, fontsize=8)
    return im


def redirect(tables, path):
    sizes, t = tables["sizes"], tables["transplant"]
    fig, ax = plt.subplots(figsize=(1.2 + 0.6 * len(_grid(sizes, t, "groups", "redirect")[0]), 1 + 0.6 * len(sizes)))
    im = _heatmap(ax, _grid(sizes, t, "groups", "redirect"), sizes, "final-position group transplant: redirect rate")
    fig.colorbar(im, ax=ax, shrink=0.8)
    ax.set_xlabel("group transplanted alone (donor → host, final token)", fontsize=7)
    fig.tight_layout()
    fig.savefig(path)
    plt.close(fig)


def removal(tables, path):
    sizes, p = tables["sizes"], tables["profile"]
    panels = [
        ("accuracy_relative", "retrieval accuracy"),
        ("d_relative", "D(target − other)"),
        ("reader_attention_relative", "main reader's attention to target"),
    ]
    width = 1.2 + 0.6 * _grid(sizes, p, "group", "accuracy").shape[1]
    fig, axes = plt.subplots(1, 3, figsize=(3 * width, 1 + 0.6 * len(sizes)))
    for ax, (col, name) in zip(axes, panels, strict=True):
        im = _heatmap(ax, _grid(sizes, p, "group", col), sizes, f"{name}\n(group zeroed / intact)", vmax=1.2)
        if ax is not axes[0]:
            ax.set_yticklabels([])
    fig.colorbar(im, ax=axes, shrink=0.8)
    fig.suptitle("removal profile: each group's writes zeroed at every position", y=1.06)
    fig.savefig(path, bbox_inches="tight")
    plt.close(fig)


def chain(tables, path):
    sizes = tables["sizes"]
    largest = sizes["model"].iloc[-1]  # scale.models lists the sizes smallest first
    t = tables["transplant"][tables["transplant"]["model"] == largest]
    t = t[t["groups"] != "none"].dropna(axis=1, how="all")
    b = tables["blocking"][tables["blocking"]["model"] == largest]
    readers = [c[: -len("_to_a")] for c in t.columns if c.endswith("_to_a")]
    fig, axes = plt.subplots(1, 2, figsize=(10, 0.9 + 0.35 * len(t)), gridspec_kw={"width_ratios": [3, 2]})
    ax = axes[0]
    y = np.arange(len(t))
    ax.barh(y, t["redirect"], color=CONDITION_COLORS["address"], alpha=0.5, label="redirect rate")
    interval(ax, t["redirect"], y, t["redirect_lo"], t["redirect_hi"], horizontal=True)
    for k, r in enumerate(readers):
        ax.plot(t[f"{r}_to_a"], y, "o", ms=4, color=PALETTE[k + 1], label=f"{r} attention to donor's target")
    ax.set_yticks(y, t["groups"], fontsize=7)
    ax.invert_yaxis()
    ax.set_xlim(0, 1.05)
    ax.legend(fontsize=6, loc="upper center", bbox_to_anchor=(0.5, -0.12), ncol=len(readers) + 1, frameon=False)
    ax.set_title(f"{largest}: group sets and earlier attention layers (A) transplanted at the final token", fontsize=8)
    ax = axes[1]
    if len(b):
        yb = np.arange(len(b))
        ax.barh(yb - 0.2, b["attention_intact"], 0.4, color=CONDITION_COLORS["intact"], label="intact")
        interval(
            ax, b["attention_intact"], yb - 0.2, b["attention_intact_lo"], b["attention_intact_hi"], horizontal=True
        )
        ax.barh(
            yb + 0.2, b["attention_blocked"], 0.4, color=CONDITION_COLORS["blocked"], label="earlier reader blocked"
        )
        interval(
            ax, b["attention_blocked"], yb + 0.2, b["attention_blocked_lo"], b["attention_blocked_hi"], horizontal=True
        )
        labels = [
            f"{r.reader}\n({r.blocked} blocked; accuracy {r.accuracy_intact:.2f} → {r.accuracy_blocked:.2f})"
            for r in b.itertuples()
        ]
        ax.set_yticks(yb, labels, fontsize=7)
        ax.invert_yaxis()
        ax.legend(fontsize=6, loc="lower right", bbox_to_anchor=(1, 1), ncol=2, frameon=False)
    else:
        ax.text(0.5, 0.5, "one reader: no chain to block", ha="center", va="center", fontsize=8)
        ax.set_yticks([])
    ax.set_xlim(0, 1.05)
    ax.set_xlabel("later reader's attention to the target", fontsize=7)
    verdict = sizes.set_index("model").loc[largest, "verdict"]
    fig.suptitle(f"chain analysis of the largest size ({verdict}); 95 % bootstrap intervals", fontsize=9)
    fig.tight_layout()
    fig.savefig(path)
    plt.close(fig)


def groups_needed(tables, path):
    s = tables["sizes"].sort_values("parameters")
    top = int(max(len(str(g).split()) for g in s["groups"])) + 1
    fig, ax = plt.subplots(figsize=(5, 3.2))
    reached = s["groups_needed"].notna()
    ax.plot(s["parameters"][reached], s["groups_needed"][reached], "o-", color=CONDITION_COLORS["address"])
    ax.plot(s["parameters"][~reached], [top] * int((~reached).sum()), "x", color=PALETTE[3], label="never reached")
    # Toys of one parameter count (seeds, controls) land on one point: one label lists them all, not overprinted.
    y = s["groups_needed"].fillna(top)
    for (parameters, at), names in s.groupby([s["parameters"], y])["model"]:
        ax.annotate("\n".join(names), (parameters, at), fontsize=6, xytext=(3, 3), textcoords="offset points")
    ax.set_xscale("log")
    ax.set_ylim(0, top + 0.5)
    ax.set_xlabel("parameters", fontsize=8)
    ax.set_ylabel(f"groups needed to redirect ≥ {s['threshold'].iloc[0]:.2f}", fontsize=8)
    if (~reached).any():
        ax.legend(fontsize=6)
    ax.set_title("how many groups carry the Address computation", fontsize=8)
    fig.tight_layout()
    fig.savefig(path)
    plt.close(fig)


FIGURES = {"redirect": redirect, "removal": removal, "chain": chain, "groups_needed": groups_needed}
