"""early_answering.csv (issue 48 part 5, docs/transfer.md "Early answering"): Lanham et al.'s early
answering beside the transfer curves of weaker students.

An early-answer reader (`transfer.early_answering`: each generating teacher's own model; or a student
with `mode: early_answer`) is given the teacher's reasoning cut at each depth k of the transfer grid and
made to answer at once. Its rows are the `early_answers` table; the curve is built exactly as a
student's transfer curve (`transfer.utility.transfer_table`: bins of k/m, the anchor k = 0 and k = m,
interpolation between observed bins) and its area is the same formula as FOTU, (1/B) sum_b f(b). The
file puts, per (teacher, dataset) with an early-answer reader, that reader's curve and area (`kind`
`early_answer`) beside each model student's transfer curve and FOTU (`kind` `transfer`): the reasoning's
value to its own model when cut short, against its value to a weaker reader who may continue it.
Nothing here enters any other report number: early answers are never rollouts.

One schema whatever ran: `section` (`area` | `curve`), teacher, dataset, reader, kind, bin (curve
rows), value, n (traces with a curve), status; a `not run` row names what to set.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from legival_core.reports.compute.aggregate import by_student, model_students, pair_frame
from legival_core.store import report as reads
from legival_core.store.db import Store
from legival_core.transfer.utility import transfer_table

if TYPE_CHECKING:
    import polars as pl

    from legival_core.reports.compute.aggregate import Aggregates

NOT_RUN = ("not run: set `transfer.early_answering: true` (each generating teacher's own model reads its traces) "
           "or add a student with `mode: early_answer`, then legival run SPEC")
EARLY, TRANSFER = "early_answer", "transfer"


def schema() -> dict[str, object]:
    import polars as pl

    return {"section": pl.Utf8, "teacher": pl.Utf8, "dataset": pl.Utf8, "reader": pl.Utf8, "kind": pl.Utf8,
            "bin": pl.Int64, "value": pl.Float64, "n": pl.Int64, "status": pl.Utf8}


def _empty(status: str) -> pl.DataFrame:
    import polars as pl

    return pl.DataFrame([{"section": "area", "status": status}], schema=schema())  # type: ignore[arg-type]


def early_answering_table(store: Store, transfer_traces: pl.DataFrame, n_bins: int, agg: Aggregates) -> pl.DataFrame:
    """The table of the module docstring; `transfer_traces` carry `tix` (the report's transfer traces),
    `agg` the report's aggregates (the model students' FOTU and curves shown beside; the human left out)."""
    import polars as pl

    readers = reads.early_readers(store)
    if readers.height == 0:
        return _empty(NOT_RUN)
    readers = readers.rename({"name": "student"}).with_columns(pl.int_range(pl.len(), dtype=pl.Int64).alias("six"))
    tt = transfer_table(reads.rollout_depths(store, transfer_traces, readers, "early_answers"), n_bins)
    early, early_curves = by_student(pair_frame(transfer_traces, tt, readers), tt)
    cells = early.select("teacher", "dataset").unique()
    students = model_students(agg.by_student).join(cells, on=["teacher", "dataset"])
    student_curves = model_students(agg.curves_by_student).join(cells, on=["teacher", "dataset"])
    area = pl.concat([
        early.select("teacher", "dataset", pl.col("student").alias("reader"), pl.lit(EARLY).alias("kind"),
                     pl.col("fotu").alias("value"), pl.col("n_curve_traces").alias("n")),
        students.select("teacher", "dataset", pl.col("student").alias("reader"), pl.lit(TRANSFER).alias("kind"),
                        pl.col("fotu").alias("value"), pl.col("n_curve_traces").alias("n")),
    ], how="vertical_relaxed").with_columns(
        pl.lit("area").alias("section"), pl.lit(None, pl.Int64).alias("bin"),
        pl.when(pl.col("value").is_not_null()).then(pl.lit("computed"))
        .otherwise(pl.lit("too few traces: no trace with answers at depth 0 and at its full length")).alias("status"))
    curve = pl.concat([
        early_curves.select("teacher", "dataset", pl.col("student").alias("reader"), pl.lit(EARLY).alias("kind"),
                            "bin", pl.col("f").alias("value"), "n"),
        student_curves.select("teacher", "dataset", pl.col("student").alias("reader"), pl.lit(TRANSFER).alias("kind"),
                              "bin", pl.col("f").alias("value"), "n"),
    ], how="vertical_relaxed").with_columns(pl.lit("curve").alias("section"), pl.lit("computed").alias("status"))
    out = pl.concat([area.select(list(schema())), curve.select(list(schema()))], how="vertical_relaxed")
    kind_order = pl.when(pl.col("kind") == EARLY).then(0).otherwise(1)
    return out.cast(schema()).sort(  # type: ignore[arg-type]
        pl.col("section") != "area", "teacher", "dataset", kind_order, "reader", "bin", nulls_last=False)


def early_answering_of(data: object) -> pl.DataFrame:
    table = getattr(data, "early_answering", None)
    return table if table is not None else _empty(NOT_RUN)
