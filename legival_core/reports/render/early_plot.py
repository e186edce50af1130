"""early_answering.png (docs/transfer.md "Early answering"): per teacher with an early-answer reader, the
reader's early-answering curve (solid) beside each model student's transfer curve on the same traces
(dashed, dotted), both averaged over the teacher's datasets weighted by their traces; the legend beside
the axes, never over the curves."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

from legival_core.reports.compute.early_answering import EARLY, early_answering_of
from legival_core.reports.render.labels import short_labels
from legival_core.reports.render.plots import _colors, _empty, _plt, fit_layout, teacher_labels

if TYPE_CHECKING:
    import polars as pl

    from legival_core.reports.compute.data import ReportData

STYLES = ("--", ":", "-.")


def _mean_curve(rows: pl.DataFrame, n_bins: int) -> tuple[list[float], list[float]]:
    """(x = b / B, f) averaged over datasets, each bin weighted by its traces."""
    import polars as pl

    c = rows.group_by("bin").agg(((pl.col("value") * pl.col("n")).sum() / pl.col("n").sum()).alias("f")).sort("bin")
    return [b / n_bins for b in c["bin"].to_list()], c["f"].to_list()


def early_answering_figure(data: ReportData) -> Any:
    """Colour: the teacher; line style: solid the early answer, dashed or dotted each student. Two
    legends (teachers; styles), every name by its short label (`labels.short_labels`)."""
    import polars as pl
    from matplotlib.lines import Line2D

    plt = _plt()
    table = early_answering_of(data)
    curves = table.filter((pl.col("section") == "curve") & pl.col("value").is_not_null())
    teachers = sorted(curves.filter(pl.col("kind") == EARLY)["teacher"].unique().to_list())
    students = sorted(curves.filter(pl.col("kind") != EARLY)["reader"].unique().to_list())
    colors = _colors(sorted(set(data.teacher_metrics["teacher"].to_list()) | set(teachers)))
    names = teacher_labels(data, teachers)
    readers = short_labels(students)
    style = {st: STYLES[i % len(STYLES)] for i, st in enumerate(students)}
    fig, ax = plt.subplots(figsize=(9, 4.2))
    if not teachers:
        _empty(ax, "no early answers yet (transfer.early_answering: true)")
    for t in teachers:
        mine = curves.filter(pl.col("teacher") == t)
        for reader in sorted(mine.filter(pl.col("kind") == EARLY)["reader"].unique().to_list()):
            x, f = _mean_curve(mine.filter((pl.col("kind") == EARLY) & (pl.col("reader") == reader)),
                               data.config.n_bins)
            ax.plot(x, f, color=colors.get(t), lw=1.8)
        for student in sorted(mine.filter(pl.col("kind") != EARLY)["reader"].unique().to_list()):
            x, f = _mean_curve(mine.filter((pl.col("kind") != EARLY) & (pl.col("reader") == student)),
                               data.config.n_bins)
            ax.plot(x, f, color=colors.get(t), lw=1.1, ls=style[student])
    ax.set_xlabel("prefix fraction k/m (bin b / B)")
    ax.set_ylabel("mean correctness f(b)")
    ax.set_ylim(0, 1)
    ax.set_title("Early answering (solid: answer forced at once) beside the students' transfer curves")
    if teachers:
        kinds = ax.legend([Line2D([], [], color="0.2", lw=1.8)] + [Line2D([], [], color="0.2", ls=style[st])
                                                                   for st in students],
                          ["early answer"] + [readers[st] for st in students], fontsize=7, frameon=False,
                          loc="lower left", bbox_to_anchor=(1.01, 0.0), title="reader", title_fontsize=7)
        ax.add_artist(kinds)
        ax.legend([Line2D([], [], color=colors.get(t), lw=1.8) for t in teachers], [names[t] for t in teachers],
                  fontsize=7, frameon=False, loc="upper left", bbox_to_anchor=(1.01, 1.0), title="teacher",
                  title_fontsize=7)
    fit_layout(fig)
    return fig


EARLY_PNG = "early_answering.png"


def write_early_plot(data: ReportData, out: Path) -> list[str]:
    """Write early_answering.png into `out` (the dashboard's "Early answering" section shows it)."""
    fig = early_answering_figure(data)
    fig.savefig(out / EARLY_PNG, bbox_inches="tight")
    _plt().close(fig)
    return [EARLY_PNG]
