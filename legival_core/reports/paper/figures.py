"""The Legi-Val paper's figures as tables (issue 15 item 8): pure functions over the report's tables.

- `rank_points` (Fig. 1 / Fig. 9): the global legibility ranking by rank points, per metric;
- `accuracy_frontier` (Fig. 4): teacher accuracy against each transfer metric, Pareto frontier marked;
- `fotu_scatter` (Fig. 5): FOTU against SOTU, accuracy and each reward model's mean score;
- `rank_by_student` (Fig. 8): the teachers' rank on each transfer metric, per student.

Every table keeps its rows whatever ran; a value that is missing says why in `status`/`detail`
(`missing.Why`, from coverage.csv). Which metrics take part comes from the registry.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

from legival_core.metrics.base import Direction, all_metrics, metrics_from
from legival_core.reports.compute.coverage import COMPUTED, NOT_RUN, TOO_FEW
from legival_core.reports.compute.missing import Why
from legival_core.reports.compute.pareto import pareto_frontier
from legival_core.reports.compute.stats import rank_values, spearman, teacher_student_metrics

if TYPE_CHECKING:
    import polars as pl

ACCURACY = "accuracy"
FOTU = "fotu"
SOTU = "sotu"
ALL = "all"
"""The `dataset` of the teacher-level rows (means over datasets) in rank_points.csv."""


def legibility_metrics() -> list[str]:
    """The metrics whose ranks make the global legibility ranking: the registry's ranked (teacher,
    dataset) metrics in column order up to the last ranked transfer metric (lengths, redundancy,
    backtracking, FOTU, SOTU, RR), without accuracy (its stage is grading: the paper sets accuracy
    against legibility, it is not part of it)."""
    ranked = [m for m in all_metrics() if m.ranked and m.in_teacher_dataset and not m.family]
    last = max((m.order for m in ranked if m.source == "transfer"), default=0)
    return [m.name for m in ranked if m.order <= last and m.stage != "grade"]


def transfer_ranked() -> list[str]:
    """The ranked transfer metrics (FOTU, SOTU, RR), column order."""
    return [m.name for m in metrics_from("transfer") if m.ranked]


def rm_columns(teacher_metrics: pl.DataFrame) -> list[str]:
    """The registered RM columns, then the columns of other RMs that were run (`rm_*` family)."""
    registered = [m.name for m in metrics_from("rewards") if not m.family]
    families = [m.name for m in metrics_from("rewards") if m.family]
    extra = [c for c in teacher_metrics.columns for f in families
             if c.startswith(f"{f}_") and c not in registered and teacher_metrics.schema[c].is_numeric()]
    return registered + extra


def _values(frame: pl.DataFrame, metric: str) -> list[float | None]:
    import polars as pl

    if metric not in frame.columns:
        return [None] * frame.height
    return frame[metric].cast(pl.Float64).to_list()


def _num(v: float | None) -> float | None:
    return None if v is None or v != v else float(v)


# --- Fig. 1 / Fig. 9 --------------------------------------------------------------------------------


def rank_points_columns() -> list[str]:
    return ["dataset", "teacher", "global_rank", "rank_points", "n_metrics",
            *[f"points_{m}" for m in legibility_metrics()], "missing"]


def _points_block(frame: pl.DataFrame, dataset: str, directions: Mapping[str, Direction],
                  why: Why) -> list[dict[str, Any]]:
    import numpy as np

    metrics = legibility_metrics()
    teachers = frame["teacher"].to_list()
    points: dict[str, list[float | None]] = {}
    for m in metrics:
        vals = np.array([np.nan if v is None else v for v in _values(frame, m)], dtype=np.float64)
        ranks = rank_values(vals, directions[m]) if m in directions else np.full(len(vals), np.nan)
        n = int((~np.isnan(ranks)).sum())
        points[m] = [None if np.isnan(r) else float(n - r + 1) for r in ranks]
    totals = np.array([sum(p for m in metrics if (p := points[m][i]) is not None) if any(
        points[m][i] is not None for m in metrics) else np.nan for i in range(len(teachers))], dtype=np.float64)
    global_rank = rank_values(totals, "higher")
    rows = []
    for i, t in enumerate(teachers):
        have = [m for m in metrics if points[m][i] is not None]
        missing = [why.reason(t, m) for m in metrics if points[m][i] is None]
        rows.append({"dataset": dataset, "teacher": t,
                     "global_rank": None if np.isnan(global_rank[i]) else int(global_rank[i]),
                     "rank_points": None if np.isnan(totals[i]) else float(totals[i]), "n_metrics": len(have),
                     **{f"points_{m}": points[m][i] for m in metrics}, "missing": "; ".join(missing)})
    return rows


def rank_points(teacher_metrics: pl.DataFrame, by_dataset: pl.DataFrame, directions: Mapping[str, Direction],
                why: Why) -> pl.DataFrame:
    """Per teacher (dataset `all`: the teacher-level values) and per (teacher, dataset): on each
    legibility metric, points = N - rank + 1 (N = teachers ranked on that metric: the best gets N,
    ties share the best rank's points), `rank_points` = their sum over the metrics the teacher is
    ranked on, `global_rank` = competition rank of that sum (1 = most points). A metric without a
    rank gives no points and is named in `missing` with the reason."""
    import polars as pl

    rows = _points_block(teacher_metrics, ALL, directions, why)
    for dataset in sorted(by_dataset["dataset"].unique().to_list()):
        rows += _points_block(by_dataset.filter(pl.col("dataset") == dataset), dataset, directions, why)
    metrics = legibility_metrics()
    schema = {"dataset": pl.Utf8, "teacher": pl.Utf8, "global_rank": pl.Int64, "rank_points": pl.Float64,
              "n_metrics": pl.Int64, **{f"points_{m}": pl.Float64 for m in metrics}, "missing": pl.Utf8}
    out = pl.DataFrame(rows, schema=schema)
    order = pl.when(pl.col("dataset") == ALL).then(0).otherwise(1)
    return out.sort(order, "dataset", "global_rank", "teacher", nulls_last=True)


# --- Fig. 4 --------------------------------------------------------------------------------------------


def accuracy_frontier(teacher_metrics: pl.DataFrame, directions: Mapping[str, Direction], why: Why) -> pl.DataFrame:
    """Per ranked transfer metric and teacher: accuracy, the metric's value and whether the teacher
    is on the (accuracy higher, metric by its direction) Pareto frontier; empty where either is
    undefined (status/detail say why)."""
    import polars as pl

    teachers = teacher_metrics["teacher"].to_list()
    acc = _values(teacher_metrics, ACCURACY)
    rows = []
    for m in transfer_ranked():
        ys = _values(teacher_metrics, m)
        front = pareto_frontier(acc, ys, directions.get(ACCURACY, "higher"), directions.get(m, "higher"))
        for t, a, y, on in zip(teachers, acc, ys, front, strict=True):
            status, detail = why.status(t, m, y)
            if status == COMPUTED:
                status, detail = why.status(t, ACCURACY, a)
            rows.append((t, m, _num(a), _num(y), on, status, detail))
    return pl.DataFrame(rows, orient="row", schema={
        "teacher": pl.Utf8, "metric": pl.Utf8, "accuracy": pl.Float64, "value": pl.Float64,
        "on_frontier": pl.Boolean, "status": pl.Utf8, "detail": pl.Utf8})


# --- Fig. 5 --------------------------------------------------------------------------------------------


def fotu_scatter(teacher_metrics: pl.DataFrame, why: Why) -> pl.DataFrame:
    """FOTU (y) against SOTU, accuracy and each RM's mean score (x), one row per (panel, teacher), with
    the panel's Spearman rho, p and n across teachers repeated on its rows. A panel without any
    value (e.g. no reward model run) keeps a row per teacher whose status and detail say why."""
    import polars as pl

    teachers = teacher_metrics["teacher"].to_list()
    fotu = _values(teacher_metrics, FOTU)
    rows = []
    for x in [SOTU, ACCURACY, *rm_columns(teacher_metrics)]:
        xs = _values(teacher_metrics, x)
        c = spearman(xs, fotu)
        for t, xv, yv in zip(teachers, xs, fotu, strict=True):
            status, detail = why.status(t, x, xv, "rewards" if x.startswith("rm_") else None)
            if status == COMPUTED:
                status, detail = why.status(t, FOTU, yv)
            rows.append((x, x, FOTU, t, _num(xv), _num(yv), status, detail, c.rho, c.p_value, c.n))
    return pl.DataFrame(rows, orient="row", schema={
        "panel": pl.Utf8, "x_metric": pl.Utf8, "y_metric": pl.Utf8, "teacher": pl.Utf8, "x": pl.Float64,
        "y": pl.Float64, "status": pl.Utf8, "detail": pl.Utf8, "rho": pl.Float64, "p_value": pl.Float64,
        "n": pl.Int64})


# --- Fig. 8 --------------------------------------------------------------------------------------------


def rank_by_student(by_student: pl.DataFrame, teachers: Sequence[str], directions: Mapping[str, Direction],
                    why: Why) -> pl.DataFrame:
    """Per ranked transfer metric, student and teacher: the teacher-level value for that student (mean
    over datasets of the (teacher, dataset, student) values) and the teacher's rank among the teachers
    with a value for that student (1 = best). Without rollouts: one row per (metric, teacher), student
    empty, status `not run`."""
    import numpy as np
    import polars as pl

    metrics = transfer_ranked()
    ts = teacher_student_metrics(by_student, metrics)
    students = sorted(ts["student"].unique().drop_nulls().to_list())
    rows: list[tuple[Any, ...]] = []
    for m in metrics:
        if not students:
            status, detail = why.missing(None, m)
            rows += [(m, None, t, None, None, 0, NOT_RUN if status == COMPUTED else status, detail)
                     for t in teachers]
            continue
        for s in students:
            sub = {r["teacher"]: r[m] for r in ts.filter(pl.col("student") == s).iter_rows(named=True)}
            vals = np.array([np.nan if sub.get(t) is None else sub[t] for t in teachers], dtype=np.float64)
            ranks = rank_values(vals, directions.get(m, "higher"))
            n = int((~np.isnan(vals)).sum())
            for t, v, r in zip(teachers, vals, ranks, strict=True):
                defined = not np.isnan(v)
                status, detail = (COMPUTED, "") if defined else (
                    (TOO_FEW, f"no value for student {s}") if t in sub else why.missing(t, m))
                rows.append((m, s, t, float(v) if defined else None, int(r) if defined else None, n, status, detail))
    return pl.DataFrame(rows, orient="row", schema={
        "metric": pl.Utf8, "student": pl.Utf8, "teacher": pl.Utf8, "value": pl.Float64, "rank": pl.Int64,
        "n_teachers": pl.Int64, "status": pl.Utf8, "detail": pl.Utf8})
