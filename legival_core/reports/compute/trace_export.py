"""`traces.parquet`: one row per trace with every per-trace number the store holds (issue 15 item 11).

The report's trace table (grade, efficiency metrics, derived columns, `transfer`) gets, in registry
order, a column for every other registered per-trace metric (`level="trace"`, not a family):

- transfer (`fotu`, `regression_rate`, `rr_count`, `student_baseline_acc`): the mean over students of
  the (trace, student) values (SPEC section 4), null where no student has one;
- text quality (the gCoT metrics, e.g. `clarity_clx`, `cohesion`, `perplexity`, `z3_acs`): the stored
  value of the row the report uses (`store.report.quality_rows`), null unless its status is `ok`;
- reward models: the registered `rm_*` columns, then the columns of any other RM that was run.

Then the raw clarity features (`clarity_raw_<field>` of `quality.clarity.ClarityRaw`: Flesch reading
ease, the SS_lite complexity, and SE/DC before clipping), read from the detail the clarity row carries
(null where it carries none), and the supervisor's verdict per condition
(`monitor_flagged_<condition>`: true when a verdict on the trace in that condition flagged it incorrect,
null = no verdict or only overflowed prompts).
The columns are the same whatever ran (`export_columns`); a column is null where its stage stored
nothing, and `coverage.csv` says why.
"""

from __future__ import annotations

import json
from dataclasses import fields
from typing import TYPE_CHECKING

from legival_core.metrics.base import MetricInfo, all_metrics
from legival_core.monitor.stats import CONDITIONS
from legival_core.quality.clarity import ClarityRaw
from legival_core.quality.group import quality_metrics
from legival_core.reports.compute.aggregate import pair_frame
from legival_core.reports.compute.rm_scores import column_name, rm_scores
from legival_core.store import Store
from legival_core.store import report as reads

if TYPE_CHECKING:
    import polars as pl

    from legival_core.reports.compute.data import ReportData

PAIR_COLUMNS = {"fotu": "fotu", "regression_rate": "rr", "rr_count": "rr_count", "student_baseline_acc": "y0"}
"""Registered per-trace transfer metric -> its column of `TransferTable.pairs`."""
MONITOR_VERDICT_PREFIX = "monitor_flagged_"


def trace_metrics_registered() -> list[MetricInfo]:
    """The registered per-trace metrics that the trace table does not carry itself."""
    return [m for m in all_metrics() if m.level == "trace" and not m.family
            and m.source in ("transfer", "quality", "rewards")]


def clarity_raw_columns() -> list[str]:
    return [f"clarity_raw_{f.name}" for f in fields(ClarityRaw)]


def monitor_conditions() -> list[str]:
    return ["clean", *CONDITIONS]


def export_columns(extra_rm: list[str] | None = None) -> list[str]:
    """The columns added to the trace table, in order (the stable part of the schema)."""
    names = [m.name for m in trace_metrics_registered()]
    return [*names, *(extra_rm or []), *clarity_raw_columns(),
            *[MONITOR_VERDICT_PREFIX + c for c in monitor_conditions()]]


def per_trace_transfer(data: ReportData) -> pl.DataFrame:
    """tix -> mean over students of each per-trace transfer value (`PAIR_COLUMNS`)."""
    import polars as pl

    pairs = pair_frame(data.traces, data.transfer, data.students)
    return pairs.group_by("tix").agg(
        pl.col(src).cast(pl.Float64).mean().alias(name) for name, src in PAIR_COLUMNS.items())


def trace_export(store: Store | None, data: ReportData) -> pl.DataFrame:
    """The trace table with every per-trace metric (module docstring); `tix` dropped."""
    import polars as pl

    t = data.traces.join(per_trace_transfer(data), on="tix", how="left")
    quality = reads.quality_rows(store, quality_metrics(), with_detail=True) if store is not None else None
    if quality is not None and quality.height:
        ok = quality.filter(pl.col("status") == "ok")
        wide = ok.pivot(on="metric", index="trace_id", values="value", aggregate_function="first")
        t = t.join(wide, on="trace_id", how="left")
        t = t.join(_clarity_raw(quality), on="trace_id", how="left")
    rm_extra: list[str] = []
    if store is not None:
        scores = rm_scores(store)
        scores = scores.rename({c: column_name(c) for c in scores.columns if c != "trace_id"})
        registered = {m.name for m in trace_metrics_registered()}
        rm_extra = sorted(c for c in scores.columns if c != "trace_id" and c not in registered)
        if scores.width > 1:
            t = t.join(scores, on="trace_id", how="left")
        t = t.join(_monitor_verdicts(store), on="trace_id", how="left")
    cols = export_columns(rm_extra)
    monitor = {MONITOR_VERDICT_PREFIX + c for c in monitor_conditions()}
    t = t.with_columns(pl.lit(None, pl.Boolean if c in monitor else pl.Float64).alias(c)
                       for c in cols if c not in t.columns)
    base = [c for c in data.traces.columns if c != "tix"]
    return t.select(*base, *cols).sort("teacher", "dataset", "problem_id", "trace_id")


def _clarity_raw(quality: pl.DataFrame) -> pl.DataFrame:
    """trace_id -> clarity_raw_<field> from the details of the clarity rows."""
    import polars as pl

    cols = clarity_raw_columns()
    rows: dict[str, dict[str, float]] = {}
    sub = quality.filter(pl.col("metric").str.starts_with("clarity_") & pl.col("detail").is_not_null())
    for tid, detail in sub.select("trace_id", "detail").iter_rows():
        try:
            value = json.loads(detail)
        except ValueError:
            continue
        if not isinstance(value, dict):
            continue
        got = rows.setdefault(tid, {})
        for c in cols:
            v = value.get(c.removeprefix("clarity_raw_"))
            if isinstance(v, int | float) and not isinstance(v, bool):
                got[c] = float(v)
    schema = {"trace_id": pl.Utf8, **{c: pl.Float64 for c in cols}}
    return pl.DataFrame([{"trace_id": k, **{c: v.get(c) for c in cols}} for k, v in rows.items()], schema=schema)


def _monitor_verdicts(store: Store) -> pl.DataFrame:
    """trace_id -> monitor_flagged_<condition> of the report's supervisor (overflow: null)."""
    import polars as pl

    conds = monitor_conditions()
    v = reads.monitor_verdicts(store)
    schema = {"trace_id": pl.Utf8, **{MONITOR_VERDICT_PREFIX + c: pl.Boolean for c in conds}}
    if v.height == 0:
        return pl.DataFrame(schema=schema)
    v = (v.filter((pl.col("status") != "overflow") & pl.col("condition").is_in(conds))
         .group_by("trace_id", "condition").agg(pl.col("predicted_incorrect").any(ignore_nulls=True)))
    if v.height == 0:
        return pl.DataFrame(schema=schema)
    wide = v.with_columns((MONITOR_VERDICT_PREFIX + pl.col("condition")).alias("condition")).pivot(
        on="condition", index="trace_id", values="predicted_incorrect")
    return wide.with_columns(pl.lit(None, pl.Boolean).alias(c) for c in schema
                             if c not in wide.columns).select(*schema)
