"""Rank tables, Spearman correlations, partial Spearman, rank stability and |delta TU| (SPEC section 5).

Pure functions over small teacher-level frames; scipy computes every correlation and p-value. A
correlation needs at least 3 teachers with both values defined and neither constant; otherwise it is
null (never a made-up number).
"""

from __future__ import annotations

import math
import warnings
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from itertools import combinations
from typing import TYPE_CHECKING, Any

from legival_core.metrics.base import Direction
from legival_core.reports.compute.aggregate import model_students

if TYPE_CHECKING:
    import numpy as np
    import polars as pl

MIN_CORRELATION_N = 3


@dataclass(frozen=True, slots=True)
class Correlation:
    """A correlation, its two-sided p-value and the number of observations it rests on."""

    rho: float | None
    p_value: float | None
    n: int


def rank_values(values: np.ndarray, direction: Direction) -> np.ndarray:
    """Competition ranks ("1224") along the last axis, 1 = best; NaN values get NaN and are not
    counted. Equal values share the best rank of their group."""
    import numpy as np

    x = np.asarray(values, dtype=np.float64)
    defined = ~np.isnan(x)
    a = x[..., :, None]
    b = x[..., None, :]
    better = (b > a) if direction == "higher" else (b < a)
    better &= defined[..., None, :]
    ranks = 1.0 + better.sum(axis=-1)
    return np.where(defined, ranks, np.nan)


def rank_table(teachers: pl.DataFrame, directions: Mapping[str, Direction]) -> pl.DataFrame:
    """`rank_<metric>` for every metric present, and `rank_change_<metric>` = rank_accuracy -
    rank_<metric> (positive: the teacher stands higher by this metric than by accuracy; the paper's
    Table 1)."""
    import polars as pl

    cols = []
    for metric, direction in directions.items():
        if metric not in teachers.columns:
            continue
        r = rank_values(teachers[metric].cast(pl.Float64).fill_null(float("nan")).to_numpy(), direction)
        cols.append(pl.Series(f"rank_{metric}", r, nan_to_null=True).cast(pl.Int64))
    out = teachers.select("teacher").with_columns(cols)
    if "rank_accuracy" in out.columns:
        out = out.with_columns(
            (pl.col("rank_accuracy") - pl.col(f"rank_{m}")).alias(f"rank_change_{m}")
            for m in directions
            if m != "accuracy" and f"rank_{m}" in out.columns
        )
    return out


def spearman(x: Sequence[float | None], y: Sequence[float | None]) -> Correlation:
    """Spearman rho (average ranks for ties) over the pairs where both values are defined."""
    import numpy as np
    from scipy import stats

    a, b = _complete(x, y)
    n = len(a)
    if n < MIN_CORRELATION_N or np.ptp(a) == 0 or np.ptp(b) == 0:
        return Correlation(None, None, n)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        res = stats.spearmanr(a, b)
    return Correlation(_num(res.statistic), _num(res.pvalue), n)


def partial_spearman(
    x: Sequence[float | None], y: Sequence[float | None], z: Sequence[float | None]
) -> Correlation:
    """Spearman correlation of x and y controlling for z: the Pearson correlation of the residuals of
    rank(x) and rank(y) after a least-squares fit on rank(z) (ranks averaged over ties), with the
    t-test p-value on n - 3 degrees of freedom. Equal to (r_xy - r_xz r_yz) / sqrt((1 - r_xz^2)(1 -
    r_yz^2)) over Spearman rhos."""
    import numpy as np
    from scipy import stats

    arr = np.array([[_f(a), _f(b), _f(c)] for a, b, c in zip(x, y, z, strict=True)], dtype=np.float64)
    arr = arr[~np.isnan(arr).any(axis=1)] if len(arr) else arr.reshape(0, 3)
    n = len(arr)
    if n < MIN_CORRELATION_N + 1 or (np.ptp(arr, axis=0) == 0).any():
        return Correlation(None, None, n)
    r = np.column_stack([stats.rankdata(arr[:, i]) for i in range(3)])
    design = np.column_stack([np.ones(n), r[:, 2]])
    res = [r[:, i] - design @ np.linalg.lstsq(design, r[:, i], rcond=None)[0] for i in (0, 1)]
    if np.allclose(res[0], 0) or np.allclose(res[1], 0):
        return Correlation(None, None, n)
    rho = float(np.corrcoef(res[0], res[1])[0, 1])
    rho = max(-1.0, min(1.0, rho))
    dof = n - 3
    if abs(rho) == 1.0:
        p = 0.0
    else:
        t = rho * math.sqrt(dof / (1 - rho * rho))
        p = float(2 * stats.t.sf(abs(t), dof))
    return Correlation(rho, p, n)


def correlation_table(
    teachers: pl.DataFrame, metrics: Sequence[str], control: str = "token_len_median",
    partial_targets: Sequence[str] = ("fotu", "sotu", "regression_rate"),
) -> pl.DataFrame:
    """Long table: `kind` 'spearman' for every pair of metrics (model level, the teacher frame is
    already averaged over datasets), and 'partial_spearman' for each transfer metric against every
    other metric controlling for `control` (FOTU | length)."""
    import polars as pl

    present = [m for m in metrics if m in teachers.columns]
    cols = {m: teachers[m].cast(pl.Float64).to_list() for m in present}
    rows: list[tuple[Any, ...]] = []
    for a, b in combinations(present, 2):
        c = spearman(cols[a], cols[b])
        rows.append(("spearman", a, b, None, c.rho, c.p_value, c.n))
    if control in cols:
        for a in partial_targets:
            if a not in cols:
                continue
            for b in present:
                if b in (a, control):
                    continue
                c = partial_spearman(cols[a], cols[b], cols[control])
                rows.append(("partial_spearman", a, b, control, c.rho, c.p_value, c.n))
    return pl.DataFrame(
        rows, orient="row",
        schema={"kind": pl.Utf8, "metric_a": pl.Utf8, "metric_b": pl.Utf8, "control": pl.Utf8,
                "rho": pl.Float64, "p_value": pl.Float64, "n": pl.Int64},
    )


def correlation_matrix(corr: pl.DataFrame, metrics: Sequence[str]) -> np.ndarray:
    """The symmetric Spearman matrix (1 on the diagonal, NaN where undefined) from `correlation_table`."""
    import numpy as np

    idx = {m: i for i, m in enumerate(metrics)}
    mat = np.full((len(metrics), len(metrics)), np.nan)
    np.fill_diagonal(mat, 1.0)
    for a, b, rho in corr.filter(corr["kind"] == "spearman").select("metric_a", "metric_b", "rho").iter_rows():
        if a in idx and b in idx and rho is not None:
            mat[idx[a], idx[b]] = mat[idx[b], idx[a]] = rho
    return mat


def rank_stability(frame: pl.DataFrame, axis: str, metrics: Sequence[str]) -> pl.DataFrame:
    """Spearman rho of the teachers' values between every pair of groups along `axis` ('dataset' or
    'student'), per metric: do the teachers rank the same way on two datasets, or for two students
    (with `delta_tu`, the across-student tables)? `frame` has one row per (teacher, axis value)."""
    import polars as pl

    rows: list[tuple[Any, ...]] = []
    groups = sorted(frame[axis].unique().drop_nulls().to_list())
    for metric in metrics:
        if metric not in frame.columns:
            continue
        wide = frame.pivot(on=axis, index="teacher", values=metric, aggregate_function="mean")
        for a, b in combinations(groups, 2):
            if a not in wide.columns or b not in wide.columns:
                continue
            c = spearman(wide[a].cast(pl.Float64).to_list(), wide[b].cast(pl.Float64).to_list())
            rows.append((axis, metric, a, b, c.rho, c.p_value, c.n))
    return pl.DataFrame(
        rows, orient="row",
        schema={"axis": pl.Utf8, "metric": pl.Utf8, "group_a": pl.Utf8, "group_b": pl.Utf8,
                "rho": pl.Float64, "p_value": pl.Float64, "n": pl.Int64},
    )


def teacher_student_metrics(by_student: pl.DataFrame, metrics: Sequence[str]) -> pl.DataFrame:
    """(teacher, student): each metric = unweighted mean over datasets (null skipped)."""
    import polars as pl

    return by_student.group_by("teacher", "student").agg(pl.col(m).mean() for m in metrics).sort("teacher", "student")


def delta_tu(teacher_student: pl.DataFrame, metrics: Sequence[str] = ("fotu", "sotu", "regression_rate")) -> pl.DataFrame:
    """Per teacher and pair of model students: |value(student a) - value(student b)| of each transfer
    metric at teacher level (an across-student table); null when either value is undefined. The human
    studies' student is left out: its FOTU is over the study's few problems, a model student's over all
    the teacher's traces, so their difference compares two samples (human_study.csv pairs them on the
    same problems)."""
    import polars as pl

    teacher_student = model_students(teacher_student)
    rows: list[tuple[Any, ...]] = []
    students = sorted(teacher_student["student"].unique().drop_nulls().to_list())
    for teacher in sorted(teacher_student["teacher"].unique().to_list()):
        sub = {r["student"]: r for r in teacher_student.filter(pl.col("teacher") == teacher).iter_rows(named=True)}
        for a, b in combinations(students, 2):
            for m in metrics:
                va = sub.get(a, {}).get(m)
                vb = sub.get(b, {}).get(m)
                d = abs(va - vb) if va is not None and vb is not None else None
                rows.append((teacher, m, a, b, va, vb, d))
    return pl.DataFrame(
        rows, orient="row",
        schema={"teacher": pl.Utf8, "metric": pl.Utf8, "student_a": pl.Utf8, "student_b": pl.Utf8,
                "value_a": pl.Float64, "value_b": pl.Float64, "abs_delta": pl.Float64},
    )


def _f(v: float | None) -> float:
    return float("nan") if v is None else float(v)


def _complete(x: Sequence[float | None], y: Sequence[float | None]) -> tuple[np.ndarray, np.ndarray]:
    import numpy as np

    a = np.array([_f(v) for v in x], dtype=np.float64)
    b = np.array([_f(v) for v in y], dtype=np.float64)
    keep = ~(np.isnan(a) | np.isnan(b))
    return a[keep], b[keep]


def _num(v: object) -> float | None:
    f = float(v)  # type: ignore[arg-type]
    return None if math.isnan(f) else f
