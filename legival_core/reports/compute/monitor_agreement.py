"""agreement.csv (issue 48 part 4, docs/agreement.md "In the report"): hint monitors against each other.

For each pair of monitors with verdicts on the same intervention samples (same sample, cue and scope,
both parsed: an unparsed verdict is no label), per cue x scope over all teachers (`teacher` = `all`)
and per teacher: raw agreement, Cohen's kappa and Gwet's AC1 on the binary verdict (categories
(False, True): AC1 depends on the scale, and a monitor that never flags still has two), each with the
item bootstrap's percentile interval (the report's `resamples` and seed), both monitors' largest
prevalence and the saturation flag (`agreement.SATURATION`). Monitors that flag almost nothing are the
saturated case where kappa collapses and AC1 does not: both are shown, with the reason where one is
undefined. One schema whatever ran: a `not run` row names the command.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from legival_core.agreement import agreement, bootstrap_ci
from legival_core.store import interventions as reads
from legival_core.store.db import Store

if TYPE_CHECKING:
    import polars as pl

NOT_RUN = "not run: legival monitorability run SPEC (with two or more `monitorability.monitors`)"
ONE_MONITOR = "not run: one monitor only (name two or more in `monitorability.monitors`)"
LABELS = (False, True)
STATS = ("raw_agreement", "kappa", "gwet_ac1")


def schema() -> dict[str, object]:
    import polars as pl

    out: dict[str, object] = {"section": pl.Utf8, "monitor_a": pl.Utf8, "monitor_b": pl.Utf8, "teacher": pl.Utf8,
                              "cue": pl.Utf8, "scope": pl.Utf8, "n": pl.Int64}
    for s in STATS:
        out |= {s: pl.Float64, f"{s}_ci_low": pl.Float64, f"{s}_ci_high": pl.Float64}
    return out | {"max_prevalence_a": pl.Float64, "max_prevalence_b": pl.Float64, "saturated": pl.Boolean,
                  "status": pl.Utf8}


def _empty(status: str) -> pl.DataFrame:
    import polars as pl

    return pl.DataFrame([{"section": "monitors", "status": status}], schema=schema())  # type: ignore[arg-type]


def monitor_agreement_table(store: Store, resamples: int, seed: int) -> pl.DataFrame:
    """The table of the module docstring, sorted by monitor pair, cue, scope, then teacher (`all` first)."""
    import polars as pl

    monitors = reads.monitor_names(store)
    if not monitors:
        return _empty(NOT_RUN)
    if len(monitors) < 2:
        return _empty(ONE_MONITOR)
    pairs = reads.verdict_pairs(store)
    if pairs.height == 0:
        return _empty("unavailable: no sample holds a parsed verdict of two monitors")
    rows = []
    everyone = pairs.with_columns(pl.lit("all").alias("teacher"))
    for frame in (everyone, pairs):
        for (ma, mb, teacher, cue, scope), g in frame.group_by("monitor_a", "monitor_b", "teacher", "cue", "scope",
                                                               maintain_order=True):
            rows.append(_row(str(ma), str(mb), str(teacher), str(cue), str(scope), g["a"].to_list(),
                             g["b"].to_list(), resamples, seed))
    out = pl.DataFrame(rows, schema=schema())  # type: ignore[arg-type]
    return out.sort("monitor_a", "monitor_b", "cue", "scope", pl.col("teacher") != "all", "teacher")


def _row(ma: str, mb: str, teacher: str, cue: str, scope: str, a: list[bool], b: list[bool], resamples: int,
         seed: int) -> dict[str, object]:
    s = agreement(a, b, LABELS)
    ci = bootstrap_ci(a, b, LABELS, resamples=resamples, seed=seed)
    notes = sorted({n for n in (s.kappa_note, s.gwet_note) if n})
    row: dict[str, object] = {"section": "monitors", "monitor_a": ma, "monitor_b": mb, "teacher": teacher, "cue": cue,
                              "scope": scope, "n": s.n, "max_prevalence_a": s.max_prevalence_a,
                              "max_prevalence_b": s.max_prevalence_b, "saturated": s.saturated,
                              "status": "computed" if not notes else "computed; undefined: " + "; ".join(notes)}
    for name, value, (low, high) in (("raw_agreement", s.raw, ci.raw), ("kappa", s.kappa, ci.kappa),
                                     ("gwet_ac1", s.gwet, ci.gwet)):
        row |= {name: value, f"{name}_ci_low": low, f"{name}_ci_high": high}
    return row


def monitor_agreement_of(data: object) -> pl.DataFrame:
    table = getattr(data, "monitor_agreement", None)
    return table if table is not None else _empty(NOT_RUN)
