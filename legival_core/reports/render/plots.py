"""Static report figures (matplotlib, Agg backend: no display needed).

Names from the user (teachers, students, reward models) are drawn as their `labels.short_labels`
(bounded, drawable, distinct; the full names are in the CSVs and the dashboard's tooltips), and every
layout goes through `fit_layout`, so no name squashes a figure or makes matplotlib warn.
"""

from __future__ import annotations

import itertools
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from legival_core.metrics.base import all_metrics, metrics_from
from legival_core.reports.compute.pareto import FRONTIERS, place_labels
from legival_core.reports.compute.stats import correlation_matrix
from legival_core.reports.compute.step_effects import ALL, FEATURES, OUTCOMES, step_analysis
from legival_core.reports.render.labels import short_labels
from legival_core.store import step_events as step_reads

if TYPE_CHECKING:
    from legival_core.reports.compute.data import ReportData, StepAnalysis

PLOT_FILES = ("pareto.png", "correlations.png", "tu_curves.png", "redundancy_elbow.png", "rank_table.png",
              "step_effects.png")
_NO_DATA = "no data yet"


def _plt() -> Any:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    # text.parse_math off: a label is a name from the traces, drawn as typed (`$x$` is no formula to parse)
    plt.rcParams.update({"figure.dpi": 110, "font.size": 9, "axes.spines.top": False, "axes.spines.right": False,
                         "text.parse_math": False})
    return plt


def _colors(teachers: list[str]) -> dict[str, Any]:
    plt = _plt()
    cmap = plt.get_cmap("tab20" if len(teachers) > 10 else "tab10")
    return {t: cmap(i % cmap.N) for i, t in enumerate(teachers)}


def teacher_labels(data: ReportData, *more: Iterable[str]) -> dict[str, str]:
    """The figure label of every teacher of the report and of the names in `more` (one figure's), so
    a teacher reads the same in every figure and no two teachers of a figure read the same."""
    return short_labels(itertools.chain(data.teacher_metrics["teacher"].to_list(), *more))


_CRAMPED = "Tight layout not applied"


def _axes_inches(fig: Any) -> list[tuple[float, float]]:
    width, height = fig.get_size_inches()
    return [(float(ax.get_position().width * width), float(ax.get_position().height * height)) for ax in fig.axes]


def fit_layout(fig: Any, tries: int = 8) -> None:
    """`fig.tight_layout()`, growing the figure (by half, along the direction that did not fit) while
    matplotlib cannot fit the axes' decorations ("Tight layout not applied": long tick labels, many
    rows) or fits them only by squashing an axes to less than half the size the figure gave it: a
    figure saved with `bbox_inches="tight"` grows with its content instead. Any other warning of the
    layout is passed on."""
    import warnings

    planned = _axes_inches(fig)
    for attempt in range(tries):
        last = attempt == tries - 1
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            fig.tight_layout()
        cramped = [str(w.message) for w in caught if _CRAMPED in str(w.message)]
        for w in caught:
            if _CRAMPED not in str(w.message) or last:
                warnings.warn_explicit(w.message, w.category, w.filename, w.lineno)
        now = _axes_inches(fig)
        wide = any("left and right" in m for m in cramped) or any(
            w < 0.5 * pw for (w, _), (pw, _) in zip(now, planned, strict=True))
        tall = any("bottom and top" in m for m in cramped) or any(
            h < 0.5 * ph for (_, h), (_, ph) in zip(now, planned, strict=True))
        if last or not (wide or tall or cramped):
            return
        width, height = fig.get_size_inches()
        fig.set_size_inches(width * (1.5 if wide or not tall else 1.0), height * (1.5 if tall else 1.0))


def write_plots(data: ReportData, out: Path) -> list[str]:
    plt = _plt()
    for name, fn in (("pareto.png", pareto_figure), ("correlations.png", correlation_figure),
                     ("tu_curves.png", tu_curve_figure), ("redundancy_elbow.png", elbow_figure),
                     ("rank_table.png", rank_table_figure), ("step_effects.png", step_effects_figure)):
        fig = fn(data)
        fig.savefig(out / name, bbox_inches="tight")
        plt.close(fig)
    return list(PLOT_FILES)


def _empty(ax: Any, text: str = _NO_DATA) -> None:
    ax.text(0.5, 0.5, text, ha="center", va="center", transform=ax.transAxes, color="0.5")


def _limits(values: list[float]) -> tuple[float, float]:
    """An axis range around `values` with 8% padding that never goes below 0 when no value does."""
    lo, hi = min(values), max(values)
    pad = (abs(lo) * 0.1 or 0.5) if lo == hi else (hi - lo) * 0.08
    low = lo - pad
    return (max(low, 0.0) if lo >= 0 else low), hi + pad


def label_points(fig: Any, ax: Any, points: list[tuple[str, float, float]], fontsize: float = 8) -> None:
    """Name each point without overlapping another name or point (`pareto.place_labels`), with a leader
    line where the name had to move away. Call after the axes limits and layout are final."""
    renderer = fig.canvas.get_renderer()
    height = fig.bbox.height
    anchors, sizes = [], []
    for name, xv, yv in points:
        px, py = ax.transData.transform((xv, yv))
        anchors.append((float(px), float(height - py)))
        probe = ax.text(0, 0, name, fontsize=fontsize)
        ext = probe.get_window_extent(renderer)
        probe.remove()
        sizes.append((float(ext.width), float(ext.height)))
    b = ax.bbox
    bounds = (float(b.x0), float(height - b.y1), float(b.x1), float(height - b.y0))
    for (name, xv, yv), (box, leader) in zip(points, place_labels(anchors, sizes, bounds, radius=7), strict=True):
        arrow = {"arrowstyle": "-", "color": "0.55", "lw": 0.6, "shrinkA": 0, "shrinkB": 4} if leader else None
        ax.annotate(name, (xv, yv), xytext=(box[0], height - box[3]), textcoords="figure pixels",
                    ha="left", va="bottom", fontsize=fontsize, arrowprops=arrow, zorder=3)


def frontier_panel(ax: Any, rows: list[tuple[Any, ...]], colors: dict[str, Any]) -> None:
    """One teacher scatter with its Pareto frontier: `rows` are (teacher, x, y, on_frontier); frontier
    points are outlined and joined by a dashed line. Shared by the frontiers and Legi-Val Fig. 4."""
    front = sorted((r[1], r[2]) for r in rows if r[3])
    if len(front) > 1:
        ax.plot(*zip(*front, strict=True), color="0.6", lw=1, ls="--", zorder=1, label="Pareto frontier")
    for name, xv, yv, on in rows:
        ax.scatter(xv, yv, s=60 if on else 30, color=colors.get(name), edgecolor="black" if on else "none", zorder=2)
    ax.set_xlim(*_limits([r[1] for r in rows]))
    ax.set_ylim(*_limits([r[2] for r in rows]))


def grouped_bars(ax: Any, groups: list[str], series: dict[str, list[float | None]]) -> None:
    """Bars of several series side by side per group (a missing value draws as 0), labelled groups
    and a legend."""
    w = 0.8 / max(len(series), 1)
    for j, (label, values) in enumerate(series.items()):
        ax.bar([i + j * w for i in range(len(groups))], [v or 0.0 for v in values], width=w, label=label)
    ax.set_xticks([i + 0.4 - w / 2 for i in range(len(groups))], groups, rotation=30, ha="right")


def pareto_figure(data: ReportData) -> Any:
    plt = _plt()
    transfer = {m.name for m in metrics_from("transfer")}
    t = data.teacher_metrics
    colors = _colors(t["teacher"].to_list())
    names = teacher_labels(data)
    fig, axes = plt.subplots(1, 2, figsize=(11, 4.6))
    to_label = []
    for ax, (x, y, col) in zip(axes, FRONTIERS, strict=True):
        rows = [r for r in t.select("teacher", x, y, col).iter_rows() if r[1] is not None and r[2] is not None]
        ax.set_xlabel(f"{x} ({data.directions.get(x, '')} is better)")
        ax.set_ylabel(f"{y} ({data.directions.get(y, '')} is better)")
        if not rows:
            _empty(ax, f"no {y} yet (no rollouts)" if y in transfer else _NO_DATA)
            continue
        frontier_panel(ax, rows, colors)
        ax.set_title(f"{y} vs {x}")
        to_label.append((ax, [(names[r[0]], r[1], r[2]) for r in rows]))
    fig.suptitle("Pareto frontier of teachers (outlined: on the frontier)")
    fit_layout(fig)
    for ax, points in to_label:
        label_points(fig, ax, points)
    return fig


PAPER_SOURCES = ("trace", "derived", "transfer")
"""The sources of the paper's metrics: the correlation matrix shows these by default."""


@dataclass(frozen=True, slots=True)
class CorrelationView:
    """Which metrics the correlation matrix shows: `metrics` (those of the matrix with a value for at
    least one teacher, column order), `default` (the paper's: registered metrics of PAPER_SOURCES that
    enter correlations), `constant` (one value across teachers: no correlation), `absent` (no value)."""

    metrics: list[str]
    default: list[str]
    constant: list[str]
    absent: list[str]


def correlation_view(data: ReportData) -> CorrelationView:
    tm = data.teacher_metrics
    metrics, constant, absent = [], [], []
    for m in data.correlation_metrics:
        values = {v for v in tm[m].to_list() if v is not None and v == v} if m in tm.columns else set()
        if not values:
            absent.append(m)
            continue
        metrics.append(m)
        if len(values) == 1:
            constant.append(m)
    paper = {i.name for i in all_metrics() if i.source in PAPER_SOURCES and i.correlate and not i.family}
    return CorrelationView(metrics, [m for m in metrics if m in paper], constant, absent)


def correlation_figure(data: ReportData) -> Any:
    """The Spearman matrix of the paper's metrics (`correlation_view(...).default`); constant metrics
    say so instead of a diagonal 1.00."""
    import numpy as np

    plt = _plt()
    view = correlation_view(data)
    metrics = view.default
    n = len(metrics)
    fig, ax = plt.subplots(figsize=(2.2 + 0.62 * max(n, 2), 1.6 + 0.5 * max(n, 2)))
    if not metrics:
        ax.axis("off")
        _empty(ax)
        return fig
    mat = correlation_matrix(data.correlations, metrics)
    const = [m in view.constant for m in metrics]
    for i, c in enumerate(const):
        if c:
            mat[i, i] = np.nan
    im = ax.imshow(np.ma.masked_invalid(mat), cmap="RdBu_r", vmin=-1, vmax=1)
    labels = [f"{m} (constant)" if c else m for m, c in zip(metrics, const, strict=True)]
    ax.set_xticks(range(n), labels, rotation=45, ha="right")
    ax.set_yticks(range(n), labels)
    for i in range(n):
        for j in range(n):
            v = mat[i, j]
            txt = "const" if i == j and const[i] else "–" if np.isnan(v) else f"{v:.2f}"
            ax.text(j, i, txt, ha="center", va="center", fontsize=7,
                    color="white" if not np.isnan(v) and abs(v) > 0.6 else "black")
    ax.spines[:].set_visible(False)
    fig.colorbar(im, ax=ax, shrink=0.7, label="Spearman rho")
    ax.set_title(f"Spearman correlation across teachers (n = {data.teacher_metrics.height}); "
                 "the dashboard adds the other metrics", fontsize=9)
    fit_layout(fig)
    return fig


def tu_curve_figure(data: ReportData) -> Any:
    plt = _plt()
    c = data.tu_curves
    teachers = sorted(c["teacher"].unique().to_list())
    colors = _colors(sorted(data.teacher_metrics["teacher"].to_list()))
    names = teacher_labels(data, teachers)
    fig, ax = plt.subplots(figsize=(7, 4.2))
    if not teachers:
        _empty(ax, "no transfer curves yet (no rollouts)")
    for t in teachers:
        sub = c.filter(c["teacher"] == t).sort("bin")
        x = [b / data.config.n_bins for b in sub["bin"].to_list()]
        ax.plot(x, sub["mu"].to_list(), color=colors.get(t), label=names[t], lw=1.5)
        if sub["ci_low"].null_count() == 0:
            ax.fill_between(x, sub["ci_low"].to_list(), sub["ci_high"].to_list(), color=colors.get(t), alpha=0.15)
    ax.set_xlabel("prefix fraction k/m (bin b / B)")
    ax.set_ylabel("mean student correctness mu_T(b)")
    ax.set_ylim(0, 1)
    ax.set_title("Transfer-utility curves (band: 95% bootstrap over problems)")
    if teachers:
        ax.legend(fontsize=7, ncol=2, frameon=False)
    fit_layout(fig)
    return fig


def elbow_figure(data: ReportData) -> Any:
    plt = _plt()
    e = data.elbow
    teachers = sorted(e["teacher"].unique().to_list())
    colors = _colors(sorted(data.teacher_metrics["teacher"].to_list()))
    names = teacher_labels(data, teachers)
    fig, (a1, a2) = plt.subplots(1, 2, figsize=(10, 4))
    if not teachers:
        _empty(a1)
        _empty(a2)
    for t in teachers:
        sub = e.filter(e["teacher"] == t).sort("threshold")
        a1.plot(sub["threshold"].to_list(), sub["redundancy"].to_list(), marker=".", color=colors.get(t), label=names[t])
        a2.plot(sub["threshold"].to_list(), sub["rank"].to_list(), marker=".", color=colors.get(t), label=names[t])
    for ax in (a1, a2):
        ax.axvline(data.tau, color="0.5", ls=":", lw=1)
        ax.set_xlabel("similarity threshold tau")
    a1.set_ylabel("mean redundant fraction")
    a2.set_ylabel("rank (1 = least redundant)")
    a2.invert_yaxis()
    a1.set_title("Redundancy vs threshold")
    a2.set_title("Teacher rank per threshold")
    if teachers:
        a1.legend(fontsize=7, frameon=False)
    fit_layout(fig)
    return fig


def rank_table_figure(data: ReportData) -> Any:
    plt = _plt()
    t = data.teacher_metrics.sort("rank_accuracy", nulls_last=True)
    metrics = [m for m in data.directions if f"rank_{m}" in t.columns]
    fig, ax = plt.subplots(figsize=(1.6 + 1.05 * len(metrics), 0.8 + 0.32 * max(t.height, 1)))
    ax.axis("off")
    if t.height == 0:
        _empty(ax)
        return fig
    names = teacher_labels(data)
    cells, colours = [], []
    n = t.height
    cmap = plt.get_cmap("RdYlGn_r")
    for row in t.iter_rows(named=True):
        line, col = [], []
        for m in metrics:
            r = row[f"rank_{m}"]
            change = row.get(f"rank_change_{m}")
            txt = "–" if r is None else str(r)
            if r is not None and change:
                txt += f" ({'+' if change > 0 else ''}{change})"
            line.append(txt)
            col.append("white" if r is None else cmap((r - 1) / max(n - 1, 1) * 0.8 + 0.1))
        cells.append(line)
        colours.append(col)
    table = ax.table(cellText=cells, cellColours=colours, rowLabels=[names[n] for n in t["teacher"].to_list()],
                     colLabels=metrics, loc="center", cellLoc="center")
    table.auto_set_font_size(False)
    table.set_fontsize(8)
    table.scale(1, 1.3)
    ax.set_title("Rank per metric (1 = best); in brackets: change against the accuracy rank", fontsize=9)
    return fig


# --- step effects (docs/step_events.md) ---------------------------------------------------------------------

ALL_LABEL = "all teachers"
STATUS_CHARS = 60
"""A status drawn in a row of step_effects.png is cut to this many characters (the CSV has it whole)."""
STEP_ROWS_INCHES = 17.0
"""The rows of step_effects.png take at most this height (many teachers: thinner rows), so the figure
stays under the report's largest side (tests/core/reports/render/test_figure_labels.py)."""


def step_analysis_of(data: ReportData) -> StepAnalysis:
    """`data.steps`, or, for tables assembled without a store, the analysis of no events (every row
    "not run: legival step-events --db DB")."""
    if data.steps is not None:
        return data.steps
    return step_analysis(step_reads.empty_step_events(), data.traces, data.config)


def step_effects_figure(data: ReportData) -> Any:
    """Per outcome (drop, rise) a forest plot: for each feature, one row per scope (all teachers, then
    each teacher) with the risk difference and its 95% bootstrap interval; a row without an estimate
    carries its status as text (never a silently missing row)."""
    plt = _plt()
    effects = step_analysis_of(data).effects
    scopes = [ALL, *[s for s in dict.fromkeys(effects["scope"].to_list()) if s != ALL]]
    teachers = [s for s in scopes if s != ALL]
    names = teacher_labels(data, teachers, [ALL_LABEL])
    label = {s: (names[ALL_LABEL] if s == ALL else names[s]) for s in scopes}
    colors = {**_colors(sorted(data.teacher_metrics["teacher"].to_list())), ALL: "black"}
    per = len(scopes) + 1  # a blank row between features
    n_rows = len(FEATURES) * per
    fig, axes = plt.subplots(1, len(OUTCOMES), figsize=(12, 1.4 + min(0.14 * n_rows, STEP_ROWS_INCHES)), sharey=True, squeeze=False)
    by_key = {(r["scope"], r["feature"], r["outcome"]): r for r in effects.iter_rows(named=True)}
    for ax, outcome in zip(axes[0], OUTCOMES, strict=True):
        values: list[float] = []
        for f, feature in enumerate(FEATURES):
            for j, scope in enumerate(scopes):
                y = -(f * per + j)
                row = by_key.get((scope, feature, outcome))
                rd = row["risk_difference"] if row is not None else None
                if row is None or row["status"] != "computed" or rd is None:
                    why = row["status"] if row is not None else "no row"
                    why = why if len(why) <= STATUS_CHARS else why[:STATUS_CHARS - 1] + "\u2026"
                    ax.text(0.01, y, f"{label[scope]}: {why}", transform=ax.get_yaxis_transform(), fontsize=6,
                            va="center", ha="left", color="0.45")
                    continue
                lo, hi = row["rd_ci_low"], row["rd_ci_high"]
                err = None
                if lo is not None and hi is not None:
                    err = [[rd - lo], [hi - rd]]
                    values += [lo, hi]
                ax.errorbar([rd], [y], xerr=err, fmt="o", ms=4, color=colors.get(scope), capsize=2, lw=1,
                            label=label[scope] if label[scope] not in _labelled(ax) else None)
                values.append(rd)
        ax.axvline(0, color="0.5", lw=0.8, ls=":")
        lo, hi = (min(values), max(values)) if values else (-0.5, 0.5)
        pad = max(0.05, 0.08 * (hi - lo))
        ax.set_xlim(min(lo - pad, -0.05), max(hi + pad, 0.05))
        ax.set_ylim(-n_rows + 0.5, 1)
        ax.set_xlabel(f"risk difference of a {outcome} (exposed - unexposed)")
        ax.set_title(f"{outcome}: segments that could {'drop' if outcome == 'drop' else 'rise'}", fontsize=9)
    axes[0][0].set_yticks([-(f * per + (len(scopes) - 1) / 2) for f in range(len(FEATURES))], list(FEATURES))
    handles: dict[str, Any] = {}
    for ax in axes[0]:
        for h, text in zip(*ax.get_legend_handles_labels(), strict=True):
            handles.setdefault(text, h)
    if handles:
        fig.legend(list(handles.values()), list(handles), fontsize=7, frameon=False, loc="upper center",
                   ncol=min(len(handles), 6), bbox_to_anchor=(0.5, 0.0))
    fig.suptitle("Step effects per teacher, 95% bootstrap intervals over problems: association, not causation "
                 "(step_effects.csv)", fontsize=10)
    fit_layout(fig)
    return fig


def _labelled(ax: Any) -> set[str]:
    return set(ax.get_legend_handles_labels()[1])
