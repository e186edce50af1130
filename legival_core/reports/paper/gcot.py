"""The gCoT paper's analyses as tables (issue 15 item 7), from the report's teacher table and the
per-trace export (`trace_export`):

- `clarity_profile` (gCoT Fig. 7 / Table 3): per teacher, the mean of each clarity component (RD, SE,
  DC, SS_lite) and of CLX over its traces with a clarity score;
- `clx_regression` (gCoT Table 4): within each teacher, the least-squares line of each informativeness
  metric on CLX over its traces (slope, its 95% t interval, intercept, r^2, the slope's p-value);
- `dimension_table` (the dimension-to-Global-Index table): per teacher and gCoT dimension, the
  dimension score (mean of its min-max normalised metrics), its rank, the metrics it rests on, and
  Spearman rho of the dimension with the Global Index across teachers.

The metric lists are the registry's (`quality.group`: the clarity group, each metric's dimension).
One schema whatever ran: a number that cannot be computed (most informativeness models are not
installed on a CPU machine) is empty with `status` and `detail` saying why (`missing.Why`).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from legival_core.quality.group import dimensions, metric_groups
from legival_core.reports.compute.coverage import COMPUTED, TOO_FEW
from legival_core.reports.compute.missing import Why
from legival_core.reports.compute.stats import rank_values, spearman

if TYPE_CHECKING:
    import polars as pl

MIN_REGRESSION_N = 3
"""A within-teacher regression needs 3 traces with both values (one residual degree of freedom)."""
GLOBAL_INDEX = "global_index"


def clarity_metrics() -> list[str]:
    """The clarity group's rows (CLX and its four components), registry order."""
    return list(metric_groups()["clarity"])


def clx_metric() -> str:
    """The clarity dimension's one metric, CLX."""
    return dimensions()["clarity"][0]


def informativeness_metrics() -> list[str]:
    return list(dimensions().get("informativeness", ()))


def _float(v: object) -> float | None:
    if v is None or not isinstance(v, int | float):
        return None
    f = float(v)
    return None if math.isnan(f) else f


def clarity_profile(teacher_metrics: pl.DataFrame, export: pl.DataFrame, why: Why) -> pl.DataFrame:
    """Per teacher: the teacher-level mean of each clarity metric (as in teacher_metrics.csv: mean
    over the teacher's traces with an `ok` row), `n_traces` = traces with a CLX value, and why the
    profile is empty where it is."""
    import polars as pl

    metrics = clarity_metrics()
    clx = clx_metric()
    counts = dict(export.group_by("teacher").agg(pl.col(clx).is_not_null().sum()).iter_rows()) \
        if clx in export.columns else {}
    rows = []
    for r in teacher_metrics.iter_rows(named=True):
        t = r["teacher"]
        vals = {m: _float(r.get(m)) for m in metrics}
        status, detail = why.status(t, clx, vals[clx])
        rows.append({"teacher": t, **vals, "n_traces": int(counts.get(t, 0)), "status": status, "detail": detail})
    return pl.DataFrame(rows, schema={"teacher": pl.Utf8, **{m: pl.Float64 for m in metrics},
                                      "n_traces": pl.Int64, "status": pl.Utf8, "detail": pl.Utf8})


def linear_fit(x: Sequence[float], y: Sequence[float]) -> dict[str, float | None] | None:
    """Ordinary least squares y = a + b x: slope b, its 95% interval b -/+ t(0.975, n-2) se(b),
    intercept a, r^2 and the two-sided p-value of b = 0; None below 3 points or when x is constant."""
    import numpy as np
    from scipy import stats

    xa, ya = np.asarray(x, dtype=np.float64), np.asarray(y, dtype=np.float64)
    n = len(xa)
    if n < MIN_REGRESSION_N or np.ptp(xa) == 0:
        return None
    res = stats.linregress(xa, ya)
    half = float(stats.t.ppf(0.975, n - 2)) * float(res.stderr)
    r2 = float(res.rvalue) ** 2 if np.ptp(ya) > 0 else None
    p = float(res.pvalue) if not math.isnan(float(res.pvalue)) else None
    return {"slope": float(res.slope), "ci_low": float(res.slope) - half, "ci_high": float(res.slope) + half,
            "intercept": float(res.intercept), "r2": r2, "p_value": p}


REGRESSION_SCHEMA = ("teacher", "metric", "n", "slope", "ci_low", "ci_high", "intercept", "r2", "p_value",
                     "status", "detail")


def clx_regression(export: pl.DataFrame, teachers: Sequence[str], why: Why) -> pl.DataFrame:
    """Per teacher and informativeness metric: the within-teacher regression of the metric on CLX over
    the teacher's traces with both values (`linear_fit`). Empty, with the reason, where the metric (or
    CLX) was not computed or fewer than 3 traces have both."""
    import polars as pl

    clx = clx_metric()
    rows: list[dict[str, Any]] = []
    for m in informativeness_metrics():
        for t in teachers:
            sub = export.filter(pl.col("teacher") == t) if "teacher" in export.columns else export.clear()
            have_x = clx in sub.columns and sub[clx].is_not_null().any()
            have_y = m in sub.columns and sub[m].is_not_null().any()
            pair = sub.select(pl.col(clx), pl.col(m)).drop_nulls() if have_x and have_y else None
            fit = linear_fit(pair[clx].to_list(), pair[m].to_list()) if pair is not None else None
            n = pair.height if pair is not None else 0
            if fit is not None:
                rows.append({"teacher": t, "metric": m, "n": n, **fit, "status": COMPUTED, "detail": ""})
                continue
            if not have_y:
                status, detail = why.missing(t, m)
            elif not have_x:
                status, detail = why.missing(t, clx)
            else:
                status, detail = TOO_FEW, (f"{n} traces with both {clx} and {m} (needs {MIN_REGRESSION_N})"
                                           if n < MIN_REGRESSION_N else f"{clx} is constant over the traces")
            rows.append({"teacher": t, "metric": m, "n": n, "status": status, "detail": detail})
    schema = {c: pl.Float64 for c in REGRESSION_SCHEMA} | {"teacher": pl.Utf8, "metric": pl.Utf8, "n": pl.Int64,
                                                          "status": pl.Utf8, "detail": pl.Utf8}
    return pl.DataFrame(rows, schema={c: schema[c] for c in REGRESSION_SCHEMA})


def dimension_table(teacher_metrics: pl.DataFrame, why: Why) -> pl.DataFrame:
    """Per gCoT dimension (and the Global Index) and teacher: the score of teacher_metrics.csv, its rank
    across teachers (1 = best), the normalised metrics it rests on, and Spearman rho of the dimension
    with the Global Index across teachers (repeated on the dimension's rows)."""
    import numpy as np
    import polars as pl

    teachers = teacher_metrics["teacher"].to_list()

    def col(name: str) -> list[float | None]:
        if name not in teacher_metrics.columns:
            return [None] * len(teachers)
        return [_float(v) for v in teacher_metrics[name].cast(pl.Float64).to_list()]

    gi = col(GLOBAL_INDEX)
    dims: dict[str, tuple[str, list[str]]] = {d: (f"dim_{d}", list(ms)) for d, ms in dimensions().items()}
    dims[GLOBAL_INDEX] = (GLOBAL_INDEX, [f"dim_{d}" for d in dimensions()])
    rows = []
    for dim, (column, members) in dims.items():
        scores = col(column)
        ranks = rank_values(np.array([np.nan if v is None else v for v in scores], dtype=np.float64), "higher")
        c = spearman(scores, gi)
        for i, t in enumerate(teachers):
            parts = members if dim == GLOBAL_INDEX else [f"{m}_norm" for m in members]
            present = [p for p in parts if _float(_cell(teacher_metrics, i, p)) is not None]
            if scores[i] is not None:
                status, detail = COMPUTED, ""
            else:
                bases = members if dim != GLOBAL_INDEX else [m for ms in dimensions().values() for m in ms]
                status, detail = why.worst(t, bases)
            rows.append((dim, t, scores[i], None if np.isnan(ranks[i]) else int(ranks[i]), len(present),
                         ";".join(present), status, detail, c.rho, c.n))
    return pl.DataFrame(rows, orient="row", schema={
        "dimension": pl.Utf8, "teacher": pl.Utf8, "score": pl.Float64, "rank": pl.Int64, "n_members": pl.Int64,
        "members": pl.Utf8, "status": pl.Utf8, "detail": pl.Utf8, "rho_global_index": pl.Float64,
        "n_teachers": pl.Int64})


def _cell(frame: pl.DataFrame, row: int, column: str) -> object:
    return frame[column][row] if column in frame.columns else None
