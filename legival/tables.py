"""The terminal view of a report: a compact (teacher, dataset) table that fits 80+ columns, and the
coverage line. `--wide` prints every column. `python -m legival.tables DIR` prints it for a report
directory (the demo ends with it)."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import TYPE_CHECKING

from rich.cells import cell_len
from rich.text import Text

from legival.console import out_console
from legival_core.visible import visible

if TYPE_CHECKING:
    import polars as pl

def literal(value: object) -> Text:
    """`value` as rich prints it literally, the one helper for every terminal line or table cell that
    holds a name from the traces (teacher, dataset, student): a `Text` is never read as rich markup
    (`[red]` prints as `[red]`, the effect of `rich.markup.escape`) nor emoji codes (`:warning:`), and
    its control characters are escapes (`visible`)."""
    return Text(visible(value))


HEADLINE_MAX_ORDER = 230
"""The compact table shows the ranked (teacher, dataset) metrics up to the regression rate in registry
order (accuracy, lengths, redundancy, backtracking, FOTU, SOTU, RR), plus n and the Pareto flag."""

SHORT = {"n_traces": "n", "accuracy": "acc", "token_len_median": "tokens", "step_len_median": "steps",
         "redundancy": "redund", "backtracking": "backtr", "fotu": "FOTU", "sotu": "SOTU",
         "regression_rate": "RR", "on_pareto_frontier": "pareto"}


def compact_columns() -> list[str]:
    from legival_core.metrics.base import all_metrics

    metrics = [m.name for m in all_metrics()
               if m.in_teacher_dataset and m.ranked and not m.family and m.order <= HEADLINE_MAX_ORDER]
    return ["teacher", "dataset", "n_traces", *metrics]


def print_report_table(teacher_dataset: pl.DataFrame, teacher_metrics: pl.DataFrame | None, wide: bool = False) -> None:
    """Aligned plain text (no borders, nothing folded): a row is one line in any terminal or pipe."""
    df = teacher_dataset
    if teacher_metrics is not None and "on_pareto_frontier" in teacher_metrics.columns:
        df = df.join(teacher_metrics.select("teacher", "on_pareto_frontier"), on="teacher", how="left")
    cols = df.columns if wide else [c for c in [*compact_columns(), "on_pareto_frontier"] if c in df.columns]
    head = [c if wide else SHORT.get(c, c) for c in cols]
    rows = list(df.select(cols).iter_rows())
    digits = [_digits([r[i] for r in rows]) for i in range(len(cols))]
    body = [[visible(_fmt(v, digits[i])) for i, v in enumerate(row)] for row in rows]
    width = [max(cell_len(h), *(cell_len(r[i]) for r in body)) if body else len(h) for i, h in enumerate(head)]
    left = {i for i, c in enumerate(cols) if c in ("teacher", "dataset")}

    def line(cells: list[str]) -> str:
        pads = [" " * (width[i] - cell_len(c)) for i, c in enumerate(cells)]
        return "  ".join(c + pads[i] if i in left else pads[i] + c for i, c in enumerate(cells)).rstrip()

    title = "teacher x dataset" + ("" if wide else "  (legival report --wide: every column)")
    for text in (title, line(head), *[line(r) for r in body]):
        out_console.print(literal(text), highlight=False, soft_wrap=True)


def _digits(values: list[object]) -> int:
    """One number format per column: 1 decimal when the column holds a value of 100 or more, else 3."""
    floats = [abs(v) for v in values if isinstance(v, float)]
    return 1 if floats and max(floats) >= 100 else 3


def _fmt(v: object, digits: int = 3) -> str:
    if v is None:
        return "-"
    if isinstance(v, bool):
        return "yes" if v else "no"
    if isinstance(v, float):
        return f"{v + 0.0:.{digits}f}"  # + 0.0: no "-0.000"
    return str(v)


def main(argv: list[str] | None = None) -> None:
    from legival_core.safe_csv import read_csv

    args = list(sys.argv[1:] if argv is None else argv)
    wide = "--wide" in args
    folder = Path(next(a for a in args if a != "--wide"))
    tm = folder / "teacher_metrics.csv"
    print_report_table(read_csv(folder / "teacher_dataset_metrics.csv"),
                       read_csv(tm) if tm.exists() else None, wide)
    cov = folder / "coverage.csv"
    if cov.exists():
        from legival_core.reports.compute.coverage import summary_line

        out_console.print(literal(summary_line(read_csv(cov, infer_schema_length=0))), highlight=False)


if __name__ == "__main__":
    main()
