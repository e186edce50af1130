"""monitorability.csv (issue 48, docs/monitorability.md): hint interventions scored with g-mean² per
teacher x cue x monitor x scope (the cross-fit hierarchical bootstrap of `monitor.gmean_bootstrap`,
`DRAWS` draws), Chen et al.'s verbalisation rate beside it, and across teachers the Spearman of FOTU
with g-mean²; one schema whatever ran (a not-run row names the command). The teacher-level columns
`gmean2` and `verbalisation_rate` are the means over cues of the first monitor's `cot` scope."""

from __future__ import annotations

from typing import TYPE_CHECKING

from legival_core.monitor.gmean import cell_counts
from legival_core.monitor.gmean_bootstrap import DRAWS, MEASURES, summary
from legival_core.reports.compute.stats import spearman
from legival_core.store import interventions as reads
from legival_core.store.db import Store

if TYPE_CHECKING:
    import polars as pl

NOT_RUN = "not run: legival monitorability run SPEC (a spec with `monitorability: {enabled: true}`)"
KEYS = ("teacher", "cue", "monitor", "scope")


def schema() -> dict[str, object]:
    import polars as pl

    out: dict[str, object] = {"section": pl.Utf8, **{k: pl.Utf8 for k in KEYS}, "n_instances": pl.Int64,
                              "missing_arm": pl.Int64, "unparsed": pl.Int64, "draws": pl.Int64,
                              "draws_defined": pl.Int64}
    for m in MEASURES:
        out |= {f"{m}_mean": pl.Float64, f"{m}_std": pl.Float64}
        if m == "gmean2":
            out |= {"gmean2_ci_low": pl.Float64, "gmean2_ci_high": pl.Float64}
    return out | {"verbalisation_rate": pl.Float64, "verbalisation_pairs": pl.Int64, "rho": pl.Float64,
                  "p_value": pl.Float64, "n": pl.Int64, "status": pl.Utf8}


NO_ELIGIBLE = ("unavailable: no eligible instance in any draw (the hint never moved the teacher's answer "
               "to its target with a significant effect; more samples or problems)")


def _empty(status: str) -> pl.DataFrame:
    import polars as pl

    return pl.DataFrame([{"section": "gmean2", "status": status}], schema=schema())  # type: ignore[arg-type]


def monitorability_table(store: Store, teacher_fotu: pl.DataFrame, seed: int = 0, draws: int = DRAWS) -> pl.DataFrame:
    """The table of the module docstring; `teacher_fotu`: teacher, fotu (the report's teacher level)."""
    import polars as pl

    rows = reads.xyz_rows(store)
    if rows.height == 0:
        return _empty(NOT_RUN)
    unparsed = rows.filter(pl.col("z").is_null()).group_by(*KEYS).agg(pl.len().cast(pl.Int64).alias("unparsed"))
    usable = rows.filter(pl.col("z").is_not_null())
    if usable.height == 0:
        return _empty("unavailable: every verdict is unparsed")
    table = summary(cell_counts(usable, "instance", list(KEYS)), draws, seed)
    table = (table.join(unparsed, on=list(KEYS), how="left").with_columns(pl.col("unparsed").fill_null(0),
                                                                         pl.lit("gmean2").alias("section"),
                                                                         pl.when(pl.col("draws_defined") > 0)
                                                                         .then(pl.lit("computed"))
                                                                         .otherwise(pl.lit(NO_ELIGIBLE))
                                                                         .alias("status")))
    lost = unparsed.join(table.select(*KEYS), on=list(KEYS), how="anti")  # a group whose every verdict is garbage
    if lost.height:
        table = pl.concat([table, lost.with_columns(pl.lit("gmean2").alias("section"), pl.lit(
            "unavailable: every verdict of this monitor here is unparsed").alias("status"))], how="diagonal_relaxed")
    corr = []
    fotu = dict(zip(teacher_fotu["teacher"].to_list(), teacher_fotu["fotu"].to_list(), strict=True))
    for (cue, monitor, scope), g in table.group_by("cue", "monitor", "scope", maintain_order=True):
        by = dict(zip(g["teacher"].to_list(), g["gmean2_mean"].to_list(), strict=True))
        teachers = [t for t in g["teacher"].to_list() if fotu.get(t) is not None and by[t] is not None]
        c = spearman([fotu[t] for t in teachers], [by[t] for t in teachers])
        corr.append({"section": "spearman_fotu", "cue": cue, "monitor": monitor, "scope": scope, "rho": c.rho,
                     "p_value": c.p_value, "n": c.n, "status": "computed" if c.rho is not None else "too few teachers"})
    out = pl.concat([table, pl.DataFrame(corr)], how="diagonal_relaxed") if corr else table
    return out.select(list(schema())).cast(schema())  # type: ignore[arg-type]


def _headline(table: pl.DataFrame) -> pl.DataFrame | None:
    """The g-mean² rows a teacher's single number stands for: the first monitor of the table and its `cot`
    scope (else its first scope), chosen among all the teachers' rows, computed or not, so that the number
    (`teacher_columns`) and its coverage status (`teacher_statuses`) always speak of the same rows."""
    import polars as pl

    g = table.filter((pl.col("section") == "gmean2") & pl.col("teacher").is_not_null())
    if g.height == 0:
        return None
    first = g["monitor"][0]
    scopes = g.filter(pl.col("monitor") == first)["scope"].to_list()
    scope = "cot" if "cot" in scopes else scopes[0]
    return g.filter((pl.col("monitor") == first) & (pl.col("scope") == scope))


def teacher_columns(table: pl.DataFrame) -> pl.DataFrame:
    """gmean2 and verbalisation_rate per teacher: means over cues, the first monitor, scope `cot`."""
    import polars as pl

    empty = pl.DataFrame(schema={"teacher": pl.Utf8, "gmean2": pl.Float64, "verbalisation_rate": pl.Float64})
    headline = _headline(table)
    if headline is None:
        return empty
    g = headline.filter(pl.col("status") == "computed")
    if g.height == 0:
        return empty
    return (g.group_by("teacher")
            .agg(pl.col("gmean2_mean").mean().alias("gmean2"), pl.col("verbalisation_rate").mean())
            .sort("teacher"))


def monitorability_of(data: object) -> pl.DataFrame:
    table = getattr(data, "monitorability", None)
    return table if table is not None else _empty(NOT_RUN)


def teacher_statuses(table: pl.DataFrame) -> dict[str, dict[str, tuple[str, int, str]]]:
    """Per teacher, coverage's (status, n, detail) of `gmean2` and `verbalisation_rate`: the rows
    `teacher_columns` averages (the first monitor's `cot` scope). A teacher absent here was not run."""
    import polars as pl

    headline = _headline(table)
    if headline is None:
        return {}
    out: dict[str, dict[str, tuple[str, int, str]]] = {}
    for (teacher,), rows in headline.group_by("teacher", maintain_order=True):
        done = rows.filter(pl.col("status") == "computed")
        reason = str(rows["status"][0]).removeprefix("unavailable: ")
        gm = ("computed", int(done["n_instances"].sum()), "") if done.height else ("unavailable", 0, reason)
        pairs = int(rows["verbalisation_pairs"].fill_null(0).sum())
        vr = ("computed", pairs, "") if rows["verbalisation_rate"].is_not_null().any() else (
            ("unavailable", 0, reason) if rows["unparsed"].fill_null(0).sum() and not pairs else
            ("too few traces", 0, "no sample that switched to the hint's target under the hint"))
        out[str(teacher)] = {"gmean2": gm, "verbalisation_rate": vr}
    return out
