"""The shared figure style: intervals drawn where the tables say, models coloured by registry order."""

import matplotlib.pyplot as plt
import numpy as np
import pandas as pd

from hybridlens.plots import PALETTE, interval, model_color, use_models
from hybridlens.plots.zoo import eval_table, plot_eval, plot_training


def test_interval_bars_span_the_tables_bounds_and_nan_draws_nothing():
    fig, ax = plt.subplots()
    bars = interval(ax, [0, 1, 2], [0.5, 0.6, 0.2], [0.4, 0.5, np.nan], [0.7, 0.65, np.nan])
    segments = bars.lines[2][0].get_segments()
    assert [tuple(s[:, 1]) for s in segments] == [(0.4, 0.7), (0.5, 0.65), (0.2, 0.2)]
    bars = interval(ax, [0.5], [3], [0.25], [0.75], horizontal=True)
    assert tuple(bars.lines[2][0].get_segments()[0][:, 0]) == (0.25, 0.75)
    plt.close(fig)


def test_a_model_keeps_its_colour_whichever_models_a_figure_shows(tmp_path, monkeypatch):
    use_models(["qwen_toy", "granite_toy", "falcon_toy"])
    drawn = []
    monkeypatch.setattr(plt, "close", lambda fig: drawn.append(fig))  # keep the figures to read them
    curve = pd.DataFrame({"step": [0, 25], "n_pairs": [2, 2], "loss": [1.0, 0.5], "accuracy": [0.1, 0.2]})
    plot_training({"granite_toy": curve, "falcon_toy": curve}, tmp_path / "a.png")
    plot_training({"falcon_toy": curve}, tmp_path / "b.png")
    colours = [[line.get_color() for line in fig.axes[0].lines] for fig in drawn]
    assert colours == [[PALETTE[1], PALETTE[2]], [PALETTE[2]]]
    assert model_color("unlisted") == PALETTE[3]  # a model outside the registry gets the next colour


def test_model_panels_wrap_many_models_into_rows_of_six_and_keep_few_in_one_row():
    from hybridlens.plots import model_panels

    fig, panels = model_panels(3, rows=2)
    assert [ax.get_subplotspec().get_geometry()[:2] for ax in fig.axes] == [(2, 3)] * 6
    fig, panels = model_panels(8, rows=2)
    assert len(panels) == 8 and all(len(p) == 2 for p in panels)
    assert panels[6][0].get_subplotspec().rowspan.start == 2 and panels[7][1].get_subplotspec().rowspan.start == 3
    assert panels[7][1].get_subplotspec().colspan.start == 1
    assert sum(not ax.get_visible() for ax in fig.axes) == 2 * (12 - 8)  # the unused panels of the last block


def test_groups_needed_labels_toys_at_one_point_once_listing_them_all(tmp_path, monkeypatch):
    from hybridlens.plots.scale import groups_needed

    drawn = []
    monkeypatch.setattr(plt, "close", lambda fig: drawn.append(fig))
    sizes = pd.DataFrame(
        {
            "model": ["one", "seed0", "seed1", "control", "stuck"],
            "parameters": [1000, 3000, 3000, 3000, 3000],
            "groups": ["G0", "G0 G1 G2", "G0 G1 G2", "G0 G1 G2", "G0 G1 G2"],
            "groups_needed": [1, 3, 3, 1, np.nan],
            "threshold": [0.9] * 5,
        }
    )
    groups_needed({"sizes": sizes}, tmp_path / "g.png")
    labels = {(t.xy, t.get_text()) for t in drawn[0].axes[0].texts}
    # Two seeds at one point share a label; that size's control and the unreached toy (drawn at the top) get theirs.
    assert labels == {((1000, 1), "one"), ((3000, 3), "seed0\nseed1"), ((3000, 1), "control"), ((3000, 4), "stuck")}


def test_the_zoo_evaluation_shows_each_toy_on_its_own_formats_within_its_row(tmp_path, monkeypatch):
    """A notes toy and its fused_notes continuation share chat, list and rev and differ in the format they trained
    on, so each of those two formats has one toy."""
    drawn = []
    monkeypatch.setattr(plt, "close", lambda fig: drawn.append(fig))

    def evaluation(trained, value):
        rows = [
            {"format": f, "n_pairs": 8, "n": 128, "retrieval": value, "language": 1.0, "persona": 1.0}
            for f in ("chat", "list", "rev", trained)
        ]
        return {"gate": 0.95, "rows": rows}

    table = eval_table({"notes_toy": evaluation("notes", 0.25), "fused_toy": evaluation("fused_notes", 0.75)})
    plot_eval(table, tmp_path / "eval.png")
    formats = ("chat", "list", "rev", "notes", "fused_notes")
    lines = [line for line in drawn[0].axes[0].lines if line.get_label() in formats]
    points = {line.get_label(): list(zip(*line.get_data(), strict=True)) for line in lines}
    assert [len(points[f]) for f in ("chat", "list", "rev")] == [2, 2, 2]
    ((x, y),) = points["notes"]
    ((x2, y2),) = points["fused_notes"]
    assert (x, x2) == (0.25, 0.75) and -0.5 < y < 0.5 < y2 < 1.5  # each in its own toy's row
    assert len({y for f in points for _, y in points[f] if y < 0.5}) == 4  # four formats apart in a row
