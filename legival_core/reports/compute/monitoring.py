"""Monitorability results (paper section 5.2): precision/recall/F1 of the supervisor per teacher, and
their correlation with FOTU across teachers (the paper's monitorability table)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from legival_core.monitor.stats import prf
from legival_core.reports.compute.stats import partial_spearman, spearman
from legival_core.reports.compute.transfer_view import transfer_view
from legival_core.store import Store
from legival_core.store import report as reads

if TYPE_CHECKING:
    import polars as pl


def significance(p: float | None) -> str:
    if p is None:
        return ""
    return "***" if p < 0.001 else "**" if p < 0.01 else "*" if p < 0.05 else ""


def fotu_correlations(metrics: pl.DataFrame, transfer: pl.DataFrame) -> pl.DataFrame:
    """Across teachers, per (dataset, condition): Spearman(FOTU, precision), Spearman(FOTU, F1) and
    partial Spearman(FOTU, F1 | token_len_median). `transfer` has teacher, dataset (or 'all'), fotu,
    token_len_median."""
    import polars as pl

    joined = metrics.join(transfer, on=["teacher", "dataset"], how="left")
    rows: list[tuple[object, ...]] = []
    for (dataset, condition), g in joined.group_by("dataset", "condition", maintain_order=True):
        fotu = g["fotu"].to_list()
        for y in ("precision", "f1"):
            c = spearman(fotu, g[y].to_list())
            rows.append((dataset, condition, "spearman", "fotu", y, None, c.rho, c.p_value, c.n, significance(c.p_value)))
        c = partial_spearman(fotu, g["f1"].to_list(), g["token_len_median"].to_list())
        rows.append((dataset, condition, "partial_spearman", "fotu", "f1", "token_len_median", c.rho, c.p_value, c.n,
                     significance(c.p_value)))
    return pl.DataFrame(rows, orient="row", schema={
        "dataset": pl.Utf8, "condition": pl.Utf8, "kind": pl.Utf8, "metric_a": pl.Utf8, "metric_b": pl.Utf8,
        "control": pl.Utf8, "rho": pl.Float64, "p_value": pl.Float64, "n": pl.Int64, "sig": pl.Utf8,
    }).sort("dataset", "condition", "kind", "metric_b")


def monitor_report(store: Store, supervisor: str | None = None) -> tuple[pl.DataFrame, pl.DataFrame]:
    """(per teacher/dataset/condition precision-recall-F1, FOTU correlations across teachers)."""
    import polars as pl

    metrics = prf(reads.monitor_verdicts(store, supervisor))
    view = transfer_view(store)
    cols = ["teacher", "fotu", "token_len_median"]
    transfer = pl.concat([
        view.by_dataset.select("teacher", "dataset", *[pl.col(c).cast(pl.Float64) for c in cols[1:]]),
        view.by_teacher.select("teacher", pl.lit("all").alias("dataset"), *[pl.col(c).cast(pl.Float64) for c in cols[1:]]),
    ])
    return metrics, fotu_correlations(metrics, transfer)


def teacher_columns(store: Store, supervisor: str | None = None) -> pl.DataFrame:
    """monitor_precision, monitor_recall, monitor_f1 per teacher (all datasets, both conditions pooled)."""
    import polars as pl

    items = reads.monitor_verdicts(store, supervisor)
    if items.height == 0:
        return pl.DataFrame(schema={"teacher": pl.Utf8, "monitor_precision": pl.Float64,
                                    "monitor_recall": pl.Float64, "monitor_f1": pl.Float64})
    m = prf(items).filter((pl.col("dataset") == "all") & (pl.col("condition") == "all"))
    return m.select("teacher", pl.col("precision").alias("monitor_precision"),
                    pl.col("recall").alias("monitor_recall"), pl.col("f1").alias("monitor_f1"))
