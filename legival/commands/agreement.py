"""`legival agreement`: two raters' labels on the same items, from two columns of a table (issue 48 part 7;
the statistics: `legival_core.agreement`, docs/agreement.md)."""

from __future__ import annotations

import re
import time
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer

from legival.app import app
from legival.console import emit_summary, fail, out_console
from legival.paths import Role
from legival_core.run_config import Report, default_of

if TYPE_CHECKING:
    import polars as pl

    from legival_core.agreement import Agreement, AgreementCI

WHOLE = re.compile(r"[+-]?\d+")
"""An integer label as a CSV cell holds it (surrounding spaces allowed)."""


@app.command()
def agreement(
    table: Annotated[Path, typer.Argument(help="CSV (plain or gzip/zstd-compressed) or Parquet: one row per "
                                               "item, one column per rater."), Role.INPUT],
    col_a: Annotated[str, typer.Option("--a", help="The first rater's column.")],
    col_b: Annotated[str, typer.Option("--b", help="The second rater's column.")],
    ordinal: Annotated[bool, typer.Option(
        "--ordinal", help="Integer labels on an ordered scale: quadratic weights (weighted kappa, Gwet's AC2).")] = False,
    categories: Annotated[int | None, typer.Option(
        "--categories", min=2, help="K: the labels are the integers 0..K-1 (the scale; else the labels seen).")] = None,
    out: Annotated[Path | None, typer.Option("--out", help="Write the statistics as CSV here."),
                   Role.OUTPUT_FILE] = None,
    resamples: Annotated[int, typer.Option(
        min=0, help="Bootstrap resamples over items for the 95% intervals (0: none).")] = default_of(Report, "resamples"),
    seed: Annotated[int, typer.Option(min=0, help="Bootstrap seed.")] = default_of(Report, "seed"),
) -> None:
    """Raw agreement, Cohen's kappa, Gwet's AC1 (AC2 with --ordinal), prevalences and the saturation flag
    of two raters' labels. Kappa collapses when labels are saturated (70% of a rater's labels in one
    category): read AC1/AC2 there. A row with a missing or bad label -> exit 2 naming FILE:LINE and the
    column."""
    from legival_core.agreement import agreement as rater_agreement
    from legival_core.agreement import bootstrap_ci
    from legival_core.readers.input_files import InputFileError
    from legival_core.readers.tables import table_rows

    t0 = time.perf_counter()
    integers = ordinal or categories is not None
    a: list[Any] = []
    b: list[Any] = []
    try:
        for where, row in table_rows(table, (col_a, col_b)):
            a.append(_label(row[col_a], where, col_a, integers, categories))
            b.append(_label(row[col_b], where, col_b, integers, categories))
    except (InputFileError, ValueError) as e:
        fail(str(e))
    except OSError as e:
        fail(f"{table}: {e.strerror or e}")
    if not a:
        fail(f"{table}: no rows (the table holds only a header or nothing): there is nothing to compare")
    scale = _scale(a, b, categories) if integers else None
    g = rater_agreement(a, b, scale, ordinal=ordinal)
    ci = bootstrap_ci(a, b, scale, ordinal=ordinal, resamples=resamples, seed=seed)
    _print(g, ci, col_a, col_b)
    if out is not None:
        from legival_core.safe_csv import write_csv

        try:
            out.parent.mkdir(parents=True, exist_ok=True)
            write_csv(statistics_frame(g, ci), out)
        except OSError as e:
            fail(f"--out {out}: cannot write there ({e.strerror or e})")
    emit_summary({"command": "agreement", "table": str(table), "a": col_a, "b": col_b, **summary_of(g, ci),
                  "resamples": ci.resamples, "seed": seed, "out": str(out) if out else None,
                  "wall_s": round(time.perf_counter() - t0, 3)})


def _label(value: Any, where: str, column: str, integers: bool, k: int | None) -> Any:
    """A cell as a label: an integer (in 0..k-1 with --categories k) or, on a nominal scale, its text."""
    if value is None or (isinstance(value, str) and not value.strip()):
        raise ValueError(f"{where}: field '{column}': no label (an empty cell)")
    if not integers:
        return value.strip() if isinstance(value, str) else str(value)
    if isinstance(value, bool) or not (isinstance(value, int) or (isinstance(value, str) and WHOLE.fullmatch(value.strip()))):
        scale = f"0..{k - 1} (--categories {k})" if k is not None else "(--ordinal)"
        raise ValueError(f"{where}: field '{column}': expected a whole-number label {scale}, got {_shown(value)}")
    label = int(value)
    if k is not None and not 0 <= label < k:
        raise ValueError(f"{where}: field '{column}': label {label} is outside 0..{k - 1} (--categories {k})")
    return label


def _shown(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."


def _scale(a: list[Any], b: list[Any], k: int | None) -> list[int]:
    """0..k-1 with --categories, else every integer from the smallest label seen to the largest (on an
    ordinal scale the weights need the distances between labels, unseen ones between included)."""
    if k is not None:
        return list(range(k))
    seen = [*a, *b]
    return list(range(min(seen), max(seen) + 1))


def _r(v: float | None) -> float | None:
    """12 digits: a statistic of exactly 0 computed as -3e-16 reads 0 (as in the report's tables)."""
    return None if v is None else round(v, 12) + 0.0


def summary_of(g: Agreement, ci: AgreementCI) -> dict[str, Any]:
    """The JSON line's statistics (docs/agreement.md)."""
    name = g.gwet_name
    out: dict[str, Any] = {
        "n": g.n, "raw_agreement": _r(g.raw), "kappa": _r(g.kappa), name: _r(g.gwet),
        "max_prevalence_a": _r(g.max_prevalence_a), "max_prevalence_b": _r(g.max_prevalence_b),
        "saturated": g.saturated, "raw_agreement_ci": [_r(v) for v in ci.raw], "kappa_ci": [_r(v) for v in ci.kappa],
        f"{name}_ci": [_r(v) for v in ci.gwet], "ordinal": g.ordinal,
        "weights": "quadratic" if g.ordinal else "identity", "categories": list(g.categories),
        "prevalence_a": [_r(v) for v in g.prevalence_a], "prevalence_b": [_r(v) for v in g.prevalence_b],
    }
    if g.ordinal:
        out["raw_agreement_weighted"] = _r(g.raw_weighted)
    if g.kappa_note:
        out["kappa_note"] = g.kappa_note
    if g.gwet_note:
        out[f"{name}_note"] = g.gwet_note
    return out


def statistics_frame(g: Agreement, ci: AgreementCI) -> pl.DataFrame:
    """The `--out` CSV: one row per statistic (`statistic, category, value, ci_low, ci_high, n, status`),
    a prevalence row per rater and category."""
    import polars as pl

    def row(stat: str, value: float | None, interval: tuple[float | None, float | None] = (None, None),
            category: Any = None, note: str | None = None) -> dict[str, Any]:
        return {"statistic": stat, "category": None if category is None else str(category), "value": _r(value),
                "ci_low": _r(interval[0]), "ci_high": _r(interval[1]), "n": g.n,
                "status": "computed" if value is not None else f"undefined: {note}"}

    rows = [row("raw_agreement", g.raw, ci.raw), row("kappa", g.kappa, ci.kappa, note=g.kappa_note),
            row(g.gwet_name, g.gwet, ci.gwet, note=g.gwet_note)]
    if g.ordinal:
        rows.append(row("raw_agreement_weighted", g.raw_weighted))
    rows += [row("max_prevalence_a", g.max_prevalence_a), row("max_prevalence_b", g.max_prevalence_b),
             row("saturated", float(g.saturated))]
    rows += [row(f"prevalence_{side}", p, category=c) for side, prev in (("a", g.prevalence_a), ("b", g.prevalence_b))
             for c, p in zip(g.categories, prev, strict=True)]
    schema = {"statistic": pl.Utf8, "category": pl.Utf8, "value": pl.Float64, "ci_low": pl.Float64,
              "ci_high": pl.Float64, "n": pl.Int64, "status": pl.Utf8}
    return pl.DataFrame(rows, schema=schema, orient="row")


def _print(g: Agreement, ci: AgreementCI, col_a: str, col_b: str) -> None:
    from rich.table import Table

    from legival.tables import literal

    def f(v: float | None) -> str:
        return "-" if v is None else f"{v:.4f}"

    scale = f"ordinal, quadratic weights, {len(g.categories)} categories" if g.ordinal else \
        f"nominal, {len(g.categories)} categories"
    stats = Table(title=literal(f"agreement of {col_a} (a) and {col_b} (b) on {g.n} items ({scale})"))
    for c in ("statistic", "value", "95% interval"):
        stats.add_column(c)
    for name, v, iv in (("raw agreement", g.raw, ci.raw), ("Cohen's kappa" + (" (weighted)" if g.ordinal else ""),
                                                           g.kappa, ci.kappa),
                        (f"Gwet's {g.gwet_name.upper()}", g.gwet, ci.gwet)):
        stats.add_row(name, f(v), "-" if iv[0] is None else f"[{f(iv[0])}, {f(iv[1])}]")
    out_console.print(stats)
    prev = Table(title="prevalences")
    for c in ("category", "a", "b"):
        prev.add_column(c)
    for c, pa, pb in zip(g.categories, g.prevalence_a, g.prevalence_b, strict=True):
        prev.add_row(literal(c), f(pa), f(pb))
    out_console.print(prev)
    if g.saturated:
        out_console.print(f"saturated: {max(g.max_prevalence_a or 0, g.max_prevalence_b or 0):.0%} of one rater's "
                          "labels fall in one category; kappa collapses there (the prevalence paradox): read "
                          f"{g.gwet_name.upper()}", markup=False, highlight=False, soft_wrap=True)
    for what, note in (("kappa", g.kappa_note), (g.gwet_name.upper(), g.gwet_note)):
        if note:
            out_console.print(f"{what} undefined: {note}", markup=False, highlight=False, soft_wrap=True)
