"""PNG figures of the paper tables (`paper.PAPER_CSV`), drawn from exactly the rows written to the CSVs.

A figure whose numbers are missing says so on the figure, with the reason from the table's
`status`/`detail` (never a blank panel). Names are drawn as their short labels, laid out by
`plots.fit_layout` (see `plots`).
"""

from __future__ import annotations

import textwrap
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from legival_core.reports.compute.coverage import COMPUTED
from legival_core.reports.compute.rm_scores import column_name
from legival_core.reports.paper.figures import ALL, legibility_metrics
from legival_core.reports.paper.gcot import clarity_metrics
from legival_core.reports.paper.tables import exported
from legival_core.reports.render.bundle import Report
from legival_core.reports.render.labels import short_labels
from legival_core.reports.render.plots import (
    _colors,
    _empty,
    _limits,
    _plt,
    fit_layout,
    frontier_panel,
    grouped_bars,
    label_points,
    teacher_labels,
)

if TYPE_CHECKING:
    import polars as pl

PAPER_PLOTS = ("rank_points.png", "accuracy_frontier.png", "fotu_scatter.png", "rank_by_student.png",
               "student_stability.png", "rm_fotu.png", "clarity_profile.png", "clx_regression.png",
               "gcot_dimensions.png")


def write_paper_plots(report: Report, out: Path) -> list[str]:
    plt = _plt()
    figures = (rank_points_figure, accuracy_frontier_figure, fotu_scatter_figure, rank_by_student_figure,
               student_stability_figure, rm_fotu_figure, clarity_profile_figure, clx_regression_figure,
               gcot_dimensions_figure)
    for name, fn in zip(PAPER_PLOTS, figures, strict=True):
        fig = fn(report)
        fig.savefig(out / name, bbox_inches="tight")
        plt.close(fig)
    return list(PAPER_PLOTS)


def _why(rows: pl.DataFrame, limit: int = 3) -> str:
    """The distinct `status (detail)` of rows that are not computed, for a panel's message."""
    import polars as pl

    if "status" not in rows.columns:
        return "no data yet"
    bad = rows.filter(pl.col("status") != COMPUTED).select("status", "detail").unique(maintain_order=True)
    parts = [f"{s}" + (f" ({d})" if d else "") for s, d in bad.head(limit).iter_rows()]
    return _wrap(parts) or "no data yet"


def _wrap(parts: list[str], width: int = 48) -> str:
    return "\n".join(line for p in parts for line in textwrap.wrap(p, width))


def _table(report: Report, name: str) -> pl.DataFrame:
    return report.paper[name]


@dataclass(frozen=True, slots=True)
class _PanelRow:
    """A row of panels over one paper table: the figure, its axes, and each teacher's colour and label."""

    fig: Any
    axes: list[Any]
    colors: dict[str, Any]
    names: dict[str, str]


def _panel_row(report: Report, t: pl.DataFrame, panels: int, width: float, height: float) -> _PanelRow:
    """`panels` axes side by side, `width` x `height` inches each; a teacher has the same colour in every
    figure (all the report's teachers, sorted) and its label of `teacher_labels`."""
    colors = _colors(sorted(report.data.teacher_metrics["teacher"].to_list()))
    names = teacher_labels(report.data, t["teacher"].to_list())
    fig, axes = _plt().subplots(1, panels, figsize=(width * panels, height), squeeze=False)
    return _PanelRow(fig, list(axes[0]), colors, names)


def _titled(fig: Any, title: str, to_label: list[tuple[Any, list[tuple[str, float, float]]]] | None = None) -> Any:
    """The figure with its title, laid out, then its points named (their places need the final layout)."""
    fig.suptitle(title)
    fit_layout(fig)
    for ax, points in to_label or []:
        label_points(fig, ax, points)
    return fig


def rank_points_figure(report: Report) -> Any:
    import polars as pl

    plt = _plt()
    t = _table(report, "rank_points.csv").filter(pl.col("dataset") == ALL)
    t = t.filter(pl.col("rank_points").is_not_null()).sort("rank_points", "teacher", descending=[False, True])
    metrics = legibility_metrics()
    fig, ax = plt.subplots(figsize=(8, 1.2 + 0.38 * max(t.height, 2)))
    if t.height == 0:
        reasons = [r for m in _table(report, "rank_points.csv")["missing"].to_list() for r in (m or "").split("; ") if r]
        _empty(ax, "no ranked legibility metric yet:\n" + _wrap(list(dict.fromkeys(reasons))[:4], 80))
        ax.axis("off")
        return fig
    cmap = plt.get_cmap("tab10")
    names = teacher_labels(report.data, t["teacher"].to_list())
    rows = [names[n] for n in t["teacher"].to_list()]
    left = [0.0] * t.height
    for i, m in enumerate(metrics):
        vals = [v or 0.0 for v in t[f"points_{m}"].to_list()]
        ax.barh(rows, vals, left=left, color=cmap(i % 10), label=m, edgecolor="white", lw=0.5)
        left = [a + b for a, b in zip(left, vals, strict=True)]
    for y, (total, rank) in enumerate(zip(t["rank_points"].to_list(), t["global_rank"].to_list(), strict=True)):
        ax.text(total, y, f"  {total:g} (#{rank})", va="center", fontsize=8)
    ax.set_xlabel("rank points (N - rank + 1 per metric; N = teachers ranked)")
    ax.set_title("Global legibility ranking by rank points, per metric (Legi-Val Fig. 1 / Fig. 9)")
    ax.legend(fontsize=7, frameon=False, loc="lower right")
    ax.set_xlim(0, max(left) * 1.25 if max(left) > 0 else 1)
    fit_layout(fig)
    return fig


def accuracy_frontier_figure(report: Report) -> Any:
    import polars as pl

    t = _table(report, "accuracy_frontier.csv")
    metrics = list(dict.fromkeys(t["metric"].to_list())) or ["fotu"]
    row = _panel_row(report, t, len(metrics), 4.6, 4.2)
    to_label = []
    for ax, m in zip(row.axes, metrics, strict=True):
        sub = t.filter(pl.col("metric") == m)
        ok = sub.filter(pl.col("status") == COMPUTED)
        ax.set_xlabel("teacher accuracy (higher is better)")
        ax.set_ylabel(f"{m} ({report.data.directions.get(m, '')} is better)")
        ax.set_title(f"accuracy vs {m}")
        if ok.height == 0:
            _empty(ax, _why(sub))
            continue
        rows = list(ok.select("teacher", "accuracy", "value", "on_frontier").iter_rows())
        frontier_panel(ax, rows, row.colors)
        to_label.append((ax, [(row.names[r[0]], r[1], r[2]) for r in rows]))
    return _titled(row.fig, "Teacher accuracy vs transfer utility (Legi-Val Fig. 4; outlined: Pareto frontier)",
                   to_label)


def fotu_scatter_figure(report: Report) -> Any:
    import polars as pl

    t = _table(report, "fotu_scatter.csv")
    panels = list(dict.fromkeys(t["panel"].to_list()))
    rm = [p for p in panels if p.startswith("rm_")]
    shown = [p for p in panels if not p.startswith("rm_")]
    rm_with = [p for p in rm if t.filter((pl.col("panel") == p) & (pl.col("status") == COMPUTED)).height]
    shown += rm_with[:3] or (["rm"] if rm else [])
    panel = short_labels(shown)  # an RM panel is named after a reward model the user may name
    row = _panel_row(report, t, len(shown), 4.2, 4.0)
    to_label = []
    for ax, p in zip(row.axes, shown, strict=True):
        sub = t.filter(pl.col("panel").str.starts_with("rm_")) if p == "rm" else t.filter(pl.col("panel") == p)
        ok = sub.filter(pl.col("status") == COMPUTED)
        ax.set_xlabel("reward-model score (teacher mean)" if p == "rm" else panel[p])
        ax.set_ylabel("fotu")
        if ok.height == 0:
            ax.set_title(f"fotu vs {panel[p]}")
            _empty(ax, ("RM score: " if p == "rm" else "") + _why(sub, 2))
            continue
        rho = ok["rho"][0]
        ax.set_title(f"fotu vs {panel[p]}\nSpearman rho = {'–' if rho is None else f'{rho:.2f}'} (n = {ok['n'][0]})",
                     fontsize=9)
        rows = list(ok.select("teacher", "x", "y").iter_rows())
        for name, x, y in rows:
            ax.scatter(x, y, s=36, color=row.colors.get(name), zorder=2)
        ax.set_xlim(*_limits([r[1] for r in rows]))
        ax.set_ylim(*_limits([r[2] for r in rows]))
        to_label.append((ax, [(row.names[n], x, y) for n, x, y in rows]))
    return _titled(row.fig, "FOTU against SOTU, accuracy and reward-model score across teachers (Legi-Val Fig. 5)",
                   to_label)


def rank_by_student_figure(report: Report) -> Any:
    import polars as pl
    from matplotlib.ticker import MaxNLocator

    t = _table(report, "rank_by_student.csv")
    metrics = list(dict.fromkeys(t["metric"].to_list())) or ["fotu"]
    row = _panel_row(report, t, len(metrics), 4.2, 4.2)
    student = short_labels(t["student"].to_list())
    for ax, m in zip(row.axes, metrics, strict=True):
        sub = t.filter(pl.col("metric") == m)
        ok = sub.filter(pl.col("status") == COMPUTED)
        ax.set_title(f"rank on {m} by student")
        if ok.height == 0:
            _empty(ax, _why(sub))
            continue
        students = sorted(ok["student"].unique().to_list())
        for teacher in sorted(ok["teacher"].unique().to_list()):
            r = {s: k for s, k in ok.filter(pl.col("teacher") == teacher).select("student", "rank").iter_rows()}
            xs = [i for i, s in enumerate(students) if s in r]
            ax.plot(xs, [r[students[i]] for i in xs], marker="o", color=row.colors.get(teacher),
                    label=row.names[teacher])
        ax.set_xticks(range(len(students)), [student[s] for s in students], rotation=20, ha="right")
        ax.set_xlim(-0.3, len(students) - 0.7)
        ax.set_ylabel("rank (1 = best)")
        ax.yaxis.set_major_locator(MaxNLocator(integer=True))
        ax.invert_yaxis()
    if row.axes[0].get_legend_handles_labels()[0]:
        row.axes[0].legend(fontsize=7, frameon=False)
    return _titled(row.fig, "Rank progression by student (Legi-Val Fig. 8)")


def student_stability_figure(report: Report) -> Any:
    import polars as pl

    plt = _plt()
    st = report.data.rank_stability.filter(pl.col("axis") == "student")
    dt = report.data.delta_tu
    fig, (a1, a2) = plt.subplots(1, 2, figsize=(10, 4))
    n_students = report.data.students.height
    if st.height == 0 and dt.height == 0:
        msg = f"needs two students with rollouts; the store has {n_students}"
        _empty(a1, msg)
        _empty(a2, msg)
    else:
        student = short_labels([*st["group_a"].to_list(), *st["group_b"].to_list()])
        labels = [f"{m}: {student[a]} vs {student[b]}"
                  for m, a, b in st.select("metric", "group_a", "group_b").iter_rows()]
        a1.barh(range(st.height), [v if v is not None else 0.0 for v in st["rho"].to_list()], color="#2f6fde")
        for i, v in enumerate(st["rho"].to_list()):
            a1.text(0.0 if v is None else v, i, " – (undefined)" if v is None else f" {v:.2f}", va="center",
                    ha="left" if (v or 0.0) >= 0 else "right", fontsize=7)
        a1.set_yticks(range(st.height), labels, fontsize=7)
        a1.set_xlim(-1.1, 1.3)
        a1.invert_yaxis()
        a1.axvline(0, color="0.5", lw=0.6)
        metrics = list(dict.fromkeys(dt["metric"].to_list()))
        teachers = sorted(dt["teacher"].unique().to_list())
        series: dict[str, list[float | None]] = {}
        for m in metrics:
            d = dict(dt.filter(pl.col("metric") == m).select("teacher", "abs_delta").iter_rows())
            series[m] = [d.get(t) for t in teachers]
        names = teacher_labels(report.data, teachers)
        grouped_bars(a2, [names[n] for n in teachers], series)
        a2.legend(fontsize=7, frameon=False)
    a1.set_title("Spearman rho of teacher values between students")
    a2.set_title("|delta TU| between students per teacher")
    return _titled(fig, "Across students (Legi-Val Tables 4 and 5: rank_stability.csv axis = student, delta_tu.csv)")


def rm_fotu_figure(report: Report) -> Any:
    import polars as pl

    plt = _plt()
    corr = _table(report, "rm_correlations.csv")
    export = exported(report.data)
    rows = corr.filter((pl.col("level") == "trace") & (pl.col("subset") == "all") & (pl.col("metric") == "fotu"))
    rms = rows["rm"].to_list()[:4]
    rm_name = short_labels(rms)
    fig, axes = plt.subplots(1, max(len(rms), 1), figsize=(4.4 * max(len(rms), 1), 4.0), squeeze=False)
    if not rms:
        _empty(axes[0][0], "RM score: " + _why(corr, 2))
        axes[0][0].set_title("trace-level RM score vs FOTU")
    for ax, rm in zip(axes[0], rms, strict=False):
        col = column_name(rm)
        r = rows.filter(pl.col("rm") == rm).row(0, named=True)
        if export is not None and col in export.columns:
            pts = export.select(col, "fotu").drop_nulls()
            ax.scatter(pts[col].to_list(), pts["fotu"].to_list(), s=6, alpha=0.35, color="#2f6fde")
        rho = r["spearman"]
        ax.set_title(f"{rm_name[rm]}\nSpearman rho = {'–' if rho is None else f'{rho:.2f}'} (n = {r['n']})", fontsize=9)
        ax.set_xlabel("RM score (per trace)")
        ax.set_ylabel("FOTU (per trace, mean over students)")
    return _titled(fig, "Trace-level reward-model score vs FOTU (Legi-Val Fig. 7; all rows: rm_correlations.csv)")


def clarity_profile_figure(report: Report) -> Any:
    import polars as pl

    plt = _plt()
    t = _table(report, "clarity_profile.csv")
    ok = t.filter(pl.col("status") == COMPUTED)
    metrics = clarity_metrics()
    fig, ax = plt.subplots(figsize=(max(6.0, 1.0 + 1.1 * max(ok.height, 1)), 4.0))
    if ok.height == 0:
        _empty(ax, _why(t))
    else:
        names = teacher_labels(report.data, ok["teacher"].to_list())
        grouped_bars(ax, [names[n] for n in ok["teacher"].to_list()], {m: ok[m].to_list() for m in metrics})
        ax.set_ylim(0, 1.05)
        ax.legend(fontsize=7, frameon=False, ncol=len(metrics))
    ax.set_ylabel("mean score (0-1)")
    ax.set_title("Clarity profile per teacher: RD, SE, DC, SS_lite, CLX (gCoT Fig. 7 / Table 3)")
    fit_layout(fig)
    return fig


def clx_regression_figure(report: Report) -> Any:
    import polars as pl

    plt = _plt()
    t = _table(report, "clx_regression.csv")
    ok = t.filter(pl.col("status") == COMPUTED)
    fig, ax = plt.subplots(figsize=(7, 1.6 + 0.35 * max(ok.height, 3)))
    if ok.height == 0:
        _empty(ax, "no within-teacher regression:\n" + _why(t))
        ax.axis("off")
    else:
        names = teacher_labels(report.data, ok["teacher"].to_list())
        labels = [f"{names[a]} / {b}" for a, b in ok.select("teacher", "metric").iter_rows()]
        for y, (s, lo, hi) in enumerate(ok.select("slope", "ci_low", "ci_high").iter_rows()):
            ax.plot([lo, hi], [y, y], color="0.4", lw=1.2)
            ax.scatter([s], [y], color="#2f6fde", zorder=3)
        ax.axvline(0, color="0.6", ls=":", lw=1)
        ax.set_yticks(range(ok.height), labels, fontsize=8)
        ax.set_xlabel("slope of informativeness on CLX (95% CI)")
    ax.set_title("Within-teacher regression of informativeness on CLX (gCoT Table 4)")
    fit_layout(fig)
    return fig


def gcot_dimensions_figure(report: Report) -> Any:
    import numpy as np
    import polars as pl

    plt = _plt()
    t = _table(report, "gcot_dimensions.csv")
    dims = list(dict.fromkeys(t["dimension"].to_list()))
    teachers = sorted(t["teacher"].unique().to_list())
    fig, ax = plt.subplots(figsize=(1.8 + 1.2 * max(len(dims), 1), 1.2 + 0.4 * max(len(teachers), 2)))
    if not teachers or t.filter(pl.col("status") == COMPUTED).height == 0:
        _empty(ax, "no gCoT dimension yet:\n" + _why(t, 2))
        ax.axis("off")
        return fig
    score = {(d, te): s for d, te, s in t.select("dimension", "teacher", "score").iter_rows()}
    mat = np.array([[np.nan if score.get((d, te)) is None else score[(d, te)] for d in dims] for te in teachers])
    im = ax.imshow(np.ma.masked_invalid(mat), cmap="viridis", vmin=0, vmax=1, aspect="auto")
    for i in range(len(teachers)):
        for j in range(len(dims)):
            v = mat[i, j]
            ax.text(j, i, "–" if np.isnan(v) else f"{v:.2f}", ha="center", va="center", fontsize=8,
                    color="white" if not np.isnan(v) and v < 0.5 else "black")
    ax.set_xticks(range(len(dims)), dims, rotation=30, ha="right")
    names = teacher_labels(report.data, teachers)
    ax.set_yticks(range(len(teachers)), [names[n] for n in teachers])
    fig.colorbar(im, ax=ax, shrink=0.8, label="score (1 = best)")
    ax.set_title("gCoT dimensions and Global Index per teacher")
    fit_layout(fig)
    return fig
