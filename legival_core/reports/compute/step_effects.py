"""Step effects (issue 41, docs/step_events.md): how much each feature of a segment's steps goes with a drop
(or a rise) of the student's correctness, per teacher and overall, from the stored step events.

Three tables, each with one schema whatever ran (a row for every scope x feature x outcome, or scope x
outcome x term, with a `status` saying why a number is missing):

- `step_effects`: per (scope, feature, outcome) the 2x2 table of exposed/unexposed segments against
  the outcome, among the segments that could have it (a drop needs y_start > 0, a rise y_start < 1;
  a segment whose feature is null is left out): risk difference and odds ratio (Haldane-Anscombe +0.5
  on every cell only when a cell is 0, flagged in `or_haldane`), 95% percentile intervals of both over
  a cluster bootstrap of PROBLEMS (the report's resampling unit: per dataset, as many problems as it
  has, drawn with replacement; every segment of a drawn problem comes along once per draw), and a
  permutation p-value (the feature permuted across the segments; the permuted count of exposed events
  is drawn from its exact law, the hypergeometric, so B permutations cost B draws; two-sided as
  Fisher's exact test: tables no more probable than the observed one);
- `step_logistic`: per (scope, outcome) a logistic model with all features together
  (`statsmodels.api.Logit`, standard errors clustered by problem), continuous features standardised;
- `student_agreement`: per scope, among the segments (trace, k_start, k_end) seen by two students or
  more and dropped by at least one, the share dropped by every one; and, among the segments two students
  or more could drop (y_start > 0), each such student a rater of "dropped or not" (`legival_core.agreement`):
  their pairwise raw agreement, Fleiss' kappa and Gwet's multi-rater AC1 with 95% intervals over
  segments resampled, the share of drops (`drop_prevalence`) and the saturation flag (drops are rare:
  Fleiss' kappa collapses where AC1 does not).

All of it is association, never causation: a feature can go with drops because both follow from
something else (a hard problem, a long trace).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import TYPE_CHECKING

from legival_core.agreement import multi_rater_ci, multi_rater_counts
from legival_core.intervals import interval_1d
from legival_core.reports.compute.coverage import stage_command
from legival_core.reports.compute.data import ReportConfig, StepAnalysis
from legival_core.reports.compute.step_logit import (
    LOGIT_BINARY,
    LOGIT_CONTINUOUS,
    LOGIT_SCHEMA,
    fit_rows,
)
from legival_core.reports.compute.step_logit import LOGIT_TERMS as LOGIT_TERMS  # the logistic rows' terms

if TYPE_CHECKING:
    import numpy as np
    import polars as pl

ALL = "all"
FEATURES = ("backtracking", "redundant", "answer_stated", "self_check", "late", "long")
OUTCOMES = ("drop", "rise")
MIN_EVENTS = 10
"""Fewer events (segments with the outcome) than this in a 2x2 table: "too few events"."""
LATE_AFTER = 0.5
RESAMPLE_BLOCK = 64
"""Bootstrap resamples drawn together (a block of draws is resamples x problems)."""


def step_analysis(events: pl.DataFrame, traces: pl.DataFrame, config: ReportConfig | None = None) -> StepAnalysis:
    """The three tables (module docstring) from the stored events (`store.step_events.step_events`) and the
    report's trace table (trace_id, teacher, dataset, problem_id; `transfer` when present keeps the
    transfer traces only)."""
    config = config or ReportConfig()
    frame = step_frame(events, traces, config.tau)
    ran = events.height > 0
    logistic, agreement = _logistic(frame), _agreement(frame, config)
    if not ran:  # the same rows, saying why every number is missing (not "too few events")
        import polars as pl

        logistic, agreement = (t.with_columns(pl.lit(f"not run: {stage_command('step_events')}").alias(c)
                                              for c in ("status", "kappa_status") if c in t.columns)
                               for t in (logistic, agreement))
    return StepAnalysis(_effects(frame, config, ran=ran), logistic, agreement)


def step_effects(events: pl.DataFrame, traces: pl.DataFrame, config: ReportConfig | None = None) -> pl.DataFrame:
    config = config or ReportConfig()
    return _effects(step_frame(events, traces, config.tau), config, ran=events.height > 0)


def step_logistic(events: pl.DataFrame, traces: pl.DataFrame, config: ReportConfig | None = None) -> pl.DataFrame:
    config = config or ReportConfig()
    return _logistic(step_frame(events, traces, config.tau))


def student_agreement(events: pl.DataFrame, traces: pl.DataFrame, config: ReportConfig | None = None) -> pl.DataFrame:
    config = config or ReportConfig()
    return _agreement(step_frame(events, traces, config.tau), config)


@dataclass(frozen=True, slots=True)
class StepFrame:
    """The events as the statistics read them: one row per event of a transfer trace, strings replaced
    by numbers (`_scope`: the teacher's index in `scopes`, `_pi`: the problem's row of `problems`,
    `_t`: the trace's), the binary features beside their sources. `scopes` ends with "all"."""

    rows: pl.DataFrame
    scopes: list[str]
    problems: pl.DataFrame
    long_median: float | None
    tau: float


def step_frame(events: pl.DataFrame, traces: pl.DataFrame, tau: float) -> StepFrame:
    """The events of the transfer traces with their teacher and problem, and the binary features:
    `redundant` = max_cos > tau, `late` = position > 0.5, `long` = tokens_added above the median over
    all these events (`long_median`, the effects' `threshold`); each null where its source is null."""
    import polars as pl

    scopes = [*sorted(traces["teacher"].unique().drop_nulls().to_list()), ALL] if traces.height else [ALL]
    keep = traces.filter(pl.col("transfer")) if "transfer" in traces.columns else traces
    problems = keep.select("dataset", "problem_id").unique().sort("dataset", "problem_id")
    t = (keep.select("trace_id", "teacher", "dataset", "problem_id").with_row_index("_t")
         .join(problems.with_row_index("_pi"), on=["dataset", "problem_id"])
         .with_columns(pl.col("teacher").replace_strict({s: i for i, s in enumerate(scopes)}, default=None,
                                                        return_dtype=pl.Int32).alias("_scope"))
         .select("trace_id", "_t", "_pi", "_scope"))
    cols = ["trace_id", "k_start", "k_end", "outcome", "y_start", "n_steps", "tokens_added", "position",
            "backtracking", "max_cos", "answer_stated", "self_check"]
    similarity = (pl.col("similarity") if "similarity" in events.columns else pl.lit(None)).cast(pl.Boolean)
    f = events.select(*cols, similarity.alias("similarity")).join(t, on="trace_id", how="inner").drop("trace_id")
    got = f["tokens_added"].cast(pl.Float64).median() if f.height else None
    median = float(got) if isinstance(got, int | float) else None
    rows = f.with_columns(
        (pl.col("max_cos") > tau).alias("redundant"),
        (pl.col("position") > LATE_AFTER).alias("late"),
        (pl.col("tokens_added") > (median if median is not None else math.inf)).alias("long"),
    )
    return StepFrame(rows, scopes, problems, median, tau)


def _threshold(feature: str, frame: StepFrame) -> float | None:
    return {"redundant": frame.tau, "late": LATE_AFTER, "long": frame.long_median}.get(feature)


ANSWER_UNAVAILABLE = ("unavailable: the gold answer cannot be spotted in a step (no cheap answer extraction for "
                      "the dataset, or no single-expression gold stored)")
"""`answer_stated` null for every segment: `transfer.step_events.answer_defined` was false for each trace (its
grader has no finder to run on a step, or its gold is missing or not one expression)."""
MISSING = {"backtracking": "efficiency", "redundant": "efficiency", "max_cos": "efficiency"}
"""A feature whose source the efficiency stage computes: "not run" with its command when null everywhere."""
UNAVAILABLE = {
    "answer_stated": ANSWER_UNAVAILABLE,
    "long": "unavailable: the rollouts hold no prompt token counts",
    "tokens_added": "unavailable: the rollouts hold no prompt token counts",
}


NO_R_I = "too few events: no segment holds a step with an r_i (the first step never has one)"
"""`redundant`/`max_cos` null everywhere although the traces' r_i are stored (some segment's
`similarity` is true): their segments hold only first steps (one-step traces, or depth 0 to 1)."""


def _missing_reason(feature: str, similarity: bool = False) -> str:
    """Why a feature (or logistic term) is null for every segment of a scope: `similarity` (some segment
    of the scope was computed with its trace's r_i stored for the step_events stage's embedding model, the
    events' `similarity` column) tells r_i never computed from r_i that cannot exist."""
    if feature in MISSING:
        if similarity and feature in ("redundant", "max_cos"):
            return NO_R_I
        return f"not run: {stage_command(MISSING[feature])}"
    return UNAVAILABLE.get(feature, "too few events: no segment")


# ---------------------------------------------------------------------------------------------- 2x2


def _effects(frame: StepFrame, config: ReportConfig, ran: bool) -> pl.DataFrame:
    import numpy as np
    import polars as pl

    f, scopes, problems = frame.rows, frame.scopes, frame.problems
    every = len(scopes) - 1  # the index of "all"
    combos = [(feat, out) for feat in FEATURES for out in OUTCOMES]
    n_p, n_s, n_c = problems.height, len(scopes), len(combos)
    # per problem, scope and combo: exposed & event, exposed & none, unexposed & event, unexposed & none
    at_parts: list[np.ndarray] = []
    n_parts: list[np.ndarray] = []
    present = np.zeros((n_s, n_c), bool)  # the feature's source is not null somewhere in the scope
    at_risk = np.zeros((n_s, len(OUTCOMES)), np.int64)  # segments that could have the outcome
    similarity = np.zeros(n_s, bool)  # some segment of the scope was computed with its trace's r_i stored
    if f.height:
        similarity[f.filter(pl.col("similarity").fill_null(False))["_scope"].unique().drop_nulls().to_list()] = True
        similarity[every] = bool(f["similarity"].fill_null(False).any())
    for o, out in enumerate(OUTCOMES):
        if f.height:
            risk = pl.col("y_start") > 0 if out == "drop" else pl.col("y_start") < 1
            for scope, n in f.filter(risk).group_by("_scope").len().iter_rows():
                if scope is not None:
                    at_risk[scope, o] = n
                at_risk[every, o] += n
    for c, (feat, out) in enumerate(combos):
        if not f.height:
            continue
        risk = pl.col("y_start") > 0 if out == "drop" else pl.col("y_start") < 1
        g = (f.filter(risk & pl.col(feat).is_not_null())
             .group_by("_pi", "_scope", pl.col(feat).alias("x"), (pl.col("outcome") == out).alias("e")).len())
        for scope in g["_scope"].unique().drop_nulls().to_list():
            present[scope, c] = True
        present[every, c] = g.height > 0
        cell = 2 * (~g["x"].to_numpy()).astype(np.int64) + (~g["e"].to_numpy()).astype(np.int64)
        pi = g["_pi"].to_numpy().astype(np.int64)
        si = g["_scope"].fill_null(-1).to_numpy().astype(np.int64)
        n = g["len"].to_numpy().astype(np.float64)
        for scope_index, keep in ((si, si >= 0), (np.full(len(si), every), np.ones(len(si), bool))):
            at_parts.append(((pi[keep] * n_s + scope_index[keep]) * n_c + c) * 4 + cell[keep])
            n_parts.append(n[keep])
    size = n_p * n_s * n_c * 4
    cells = (np.bincount(np.concatenate(at_parts), weights=np.concatenate(n_parts), minlength=size) if at_parts
             else np.zeros(size)).reshape(n_p, n_s, n_c, 4)
    total = cells.sum(axis=0)  # (scopes, combos, 4)
    n_problems = (cells.sum(axis=3) > 0).sum(axis=0)  # (scopes, combos)
    boot = _bootstrap(cells, problems, config.resamples, config.seed) if config.resamples > 0 and n_p else None
    del cells
    rng = np.random.default_rng(config.seed)
    rows = []
    for s, scope in enumerate(scopes):
        for c, (feat, out) in enumerate(combos):
            a, b, cc, d = (float(v) for v in total[s, c])
            n_exp, n_unexp, n_ev = a + b, cc + d, a + cc
            status = _status(ran, at_risk[s, OUTCOMES.index(out)] > 0, present[s, c], feat, n_ev, n_exp, n_unexp,
                             bool(similarity[s]))
            row: dict[str, object] = {
                "scope": scope, "feature": feat, "outcome": out, "status": status,
                "threshold": _threshold(feat, frame), "n_segments": int(n_exp + n_unexp),
                "n_events": int(n_ev), "n_exposed": int(n_exp), "n_unexposed": int(n_unexp),
                "events_exposed": int(a), "events_unexposed": int(cc), "n_problems": int(n_problems[s, c]),
                "p_exposed": None, "p_unexposed": None, "risk_difference": None, "rd_ci_low": None,
                "rd_ci_high": None, "odds_ratio": None, "or_ci_low": None, "or_ci_high": None, "or_haldane": None,
                "p_permutation": None, "n_resamples": config.resamples}
            if status == "computed":
                rd, odds, haldane = risk_difference(a, b, cc, d), odds_ratio(a, b, cc, d), min(a, b, cc, d) == 0
                row.update(p_exposed=a / n_exp, p_unexposed=cc / n_unexp, risk_difference=rd, odds_ratio=odds,
                           or_haldane=haldane)
                if boot is not None:
                    ba, bb, bc, bd = (boot[:, s, c, i] for i in range(4))
                    (lo, hi), (olo, ohi) = (interval_1d(np.asarray(risk_difference(ba, bb, bc, bd))),
                                            interval_1d(np.asarray(odds_ratio(ba, bb, bc, bd))))
                    row.update(rd_ci_low=lo, rd_ci_high=hi, or_ci_low=olo, or_ci_high=ohi,
                               p_permutation=permutation_p(a, b, cc, d, config.resamples, rng))
            rows.append(row)
    return pl.DataFrame(rows, schema=EFFECT_SCHEMA(), orient="row")


def EFFECT_SCHEMA() -> dict[str, pl.DataType]:  # noqa: N802 (a constant, built when polars is imported)
    import polars as pl

    f, i, s = pl.Float64(), pl.Int64(), pl.Utf8()
    return {"scope": s, "feature": s, "outcome": s, "status": s, "threshold": f, "n_segments": i, "n_events": i,
            "n_exposed": i, "n_unexposed": i, "events_exposed": i, "events_unexposed": i, "n_problems": i,
            "p_exposed": f, "p_unexposed": f, "risk_difference": f, "rd_ci_low": f, "rd_ci_high": f,
            "odds_ratio": f, "or_ci_low": f, "or_ci_high": f, "or_haldane": pl.Boolean(), "p_permutation": f,
            "n_resamples": i}


def _status(ran: bool, segments: bool, present: bool, feature: str, n_events: float, n_exposed: float,
            n_unexposed: float, similarity: bool = False) -> str:
    if not ran:
        return f"not run: {stage_command('step_events')}"
    if not segments:
        return "too few events: no segment"
    if not present:
        return _missing_reason(feature, similarity)
    if n_events < MIN_EVENTS:
        return f"too few events: {int(n_events)} (fewer than {MIN_EVENTS})"
    if n_exposed == 0 or n_unexposed == 0:
        return f"too few events: no {'exposed' if n_exposed == 0 else 'unexposed'} segment"
    return "computed"


def risk_difference(a: float | np.ndarray, b: float | np.ndarray, c: float | np.ndarray,
                    d: float | np.ndarray) -> float | np.ndarray:
    """P(event | exposed) - P(event | unexposed) of the table [[a, b], [c, d]] (rows: exposed, unexposed;
    columns: event, none); NaN where a row is empty."""
    import numpy as np

    with np.errstate(divide="ignore", invalid="ignore"):
        return np.divide(a, np.add(a, b)) - np.divide(c, np.add(c, d))


def odds_ratio(a: float | np.ndarray, b: float | np.ndarray, c: float | np.ndarray,
               d: float | np.ndarray) -> float | np.ndarray:
    """(a d) / (b c), with 0.5 added to every cell of a table that has a zero cell (Haldane-Anscombe),
    and only then; NaN where a row is empty."""
    import numpy as np

    a, b, c, d = (np.asarray(v, dtype=np.float64) for v in (a, b, c, d))
    zero = (a == 0) | (b == 0) | (c == 0) | (d == 0)
    h = np.where(zero, 0.5, 0.0)
    empty = (a + b == 0) | (c + d == 0)
    with np.errstate(divide="ignore", invalid="ignore"):
        out = np.where(empty, np.nan, ((a + h) * (d + h)) / ((b + h) * (c + h)))
    return float(out) if out.ndim == 0 else out


def permutation_p(a: float, b: float, c: float, d: float, n_permutations: int, rng: np.random.Generator) -> float:
    """Two-sided permutation p-value of the table [[a, b], [c, d]]: the exposure permuted across the
    segments, the permuted count of exposed events X ~ Hypergeometric (its exact law under that
    permutation), and p = (1 + #{P(X) <= P(a)}) / (1 + B), Fisher's two-sided criterion."""
    from scipy.stats import hypergeom

    n, events, exposed = int(a + b + c + d), int(a + c), int(a + b)
    if n_permutations <= 0:
        raise ValueError("a permutation p-value needs at least one permutation")
    draws = rng.hypergeometric(events, n - events, exposed, size=n_permutations)
    law = hypergeom(n, events, exposed)
    as_extreme = int((law.logpmf(draws) <= law.logpmf(int(a)) + math.log1p(1e-7)).sum())
    return (1 + as_extreme) / (1 + n_permutations)





def _bootstrap(cells: np.ndarray, problems: pl.DataFrame, n_resamples: int, seed: int) -> np.ndarray:
    """The cell counts of every resample: (resamples, scopes, combos, 4), by problems drawn per dataset
    (`multinomial` counts in blocks, so resamples x problems never sits in memory at once)."""
    import numpy as np

    rng = np.random.default_rng(seed)
    shape = cells.shape[1:]
    flat = cells.reshape(cells.shape[0], -1)
    out = np.zeros((n_resamples, flat.shape[1]))
    datasets = problems["dataset"].to_numpy()
    for ds in sorted(set(datasets.tolist())):
        rows = np.flatnonzero(datasets == ds)
        part = flat[rows]
        n = len(rows)
        for lo in range(0, n_resamples, RESAMPLE_BLOCK):
            b = min(RESAMPLE_BLOCK, n_resamples - lo)
            idx = rng.integers(0, n, size=(b, n)) + (np.arange(b) * n)[:, None]
            w = np.bincount(idx.ravel(), minlength=b * n).reshape(b, n).astype(np.float64)
            out[lo:lo + b] += w @ part
    return out.reshape(n_resamples, *shape)


# ------------------------------------------------------------------------------------------ logistic


def _logistic(frame: StepFrame) -> pl.DataFrame:
    """Per (scope, outcome) the model of `step_logit.fit_rows`, on the segments that could have it."""
    import polars as pl

    cols = ["_scope", "_pi", "similarity", "outcome", "y_start", *LOGIT_BINARY, *LOGIT_CONTINUOUS]
    f = frame.rows.select(cols)
    rows: list[dict[str, object]] = []
    for s, scope in enumerate(frame.scopes):
        sub = f if scope == ALL else f.filter(pl.col("_scope") == s)
        for out in OUTCOMES:
            risk = sub.filter(pl.col("y_start") > 0 if out == "drop" else pl.col("y_start") < 1)
            similarity = bool(risk["similarity"].fill_null(False).any())
            reasons = {t: _missing_reason(t, similarity) for t in (*LOGIT_BINARY, *LOGIT_CONTINUOUS)}
            rows += [{"scope": scope, "outcome": out, **r} for r in fit_rows(out, risk, reasons)]
            del risk
    return pl.DataFrame(rows, schema=LOGIT_SCHEMA(), orient="row")


# ---------------------------------------------------------------------------------------- agreement


def AGREEMENT_SCHEMA() -> dict[str, pl.DataType]:  # noqa: N802
    import polars as pl

    return {"scope": pl.Utf8(), "status": pl.Utf8(), "n_segments": pl.Int64(), "n_all_drop": pl.Int64(),
            "share_all_drop": pl.Float64(), "kappa_status": pl.Utf8(), "n_rated": pl.Int64(),
            "drop_prevalence": pl.Float64(), "saturated": pl.Boolean(), "raw_agreement": pl.Float64(),
            "fleiss_kappa": pl.Float64(), "fleiss_kappa_ci_low": pl.Float64(), "fleiss_kappa_ci_high": pl.Float64(),
            "gwet_ac1": pl.Float64(), "gwet_ac1_ci_low": pl.Float64(), "gwet_ac1_ci_high": pl.Float64()}


def _chance_corrected(rated: pl.DataFrame, config: ReportConfig) -> dict[str, object]:
    """Fleiss' kappa and Gwet's AC1 of the students on `rated` (per segment: `r` students who could drop,
    `d` of them dropped), with their intervals over segments."""
    import numpy as np

    counts = np.column_stack([rated["r"].to_numpy() - rated["d"].to_numpy(), rated["d"].to_numpy()])
    mr = multi_rater_counts(counts, ("kept", "dropped"))
    fk, ac1 = multi_rater_ci(counts, config.resamples, config.seed)
    notes = [f"{name} undefined: {note}" for name, note in (("fleiss_kappa", mr.fleiss_note),
                                                             ("gwet_ac1", mr.gwet_note)) if note]
    return {"kappa_status": "; ".join(notes) if notes else "computed", "n_rated": mr.n,
            "drop_prevalence": mr.prevalence[1] if mr.n else None, "saturated": mr.saturated if mr.n else None,
            "raw_agreement": mr.raw, "fleiss_kappa": mr.fleiss_kappa, "fleiss_kappa_ci_low": fk[0],
            "fleiss_kappa_ci_high": fk[1], "gwet_ac1": mr.gwet_ac1, "gwet_ac1_ci_low": ac1[0], "gwet_ac1_ci_high": ac1[1]}


def _agreement(frame: StepFrame, config: ReportConfig) -> pl.DataFrame:
    """Per scope: the segments (trace, k_start, k_end) with two students or more and a drop by at least
    one; how many every student dropped, and their share; Fleiss' kappa and Gwet's AC1 of the students
    who could drop (module docstring)."""
    import polars as pl

    rated_all = (frame.rows.filter(pl.col("y_start") > 0).group_by("_scope", "_t", "k_start", "k_end")
                 .agg(pl.len().alias("r"), (pl.col("outcome") == "drop").sum().alias("d"))
                 .filter(pl.col("r") >= 2))

    seg = (frame.rows.group_by("_scope", "_t", "k_start", "k_end")
           .agg(pl.len().alias("n"), (pl.col("outcome") == "drop").sum().alias("drops"))
           .filter((pl.col("n") >= 2) & (pl.col("drops") >= 1)))
    rows = []
    for s, scope in enumerate(frame.scopes):
        part = seg if scope == ALL else seg.filter(pl.col("_scope") == s)
        n = part.height
        every = int((part["drops"] == part["n"]).sum()) if n else 0
        rated = rated_all if scope == ALL else rated_all.filter(pl.col("_scope") == s)
        rows.append({"scope": scope, "status": "computed" if n else "too few events: no segment two students share "
                     "with a drop", "n_segments": n, "n_all_drop": every, "share_all_drop": every / n if n else None,
                     **(_chance_corrected(rated, config) if rated.height else {
                         "kappa_status": "too few events: no segment two students could drop (y_start > 0)",
                         "n_rated": 0})})
    return pl.DataFrame(rows, schema=AGREEMENT_SCHEMA(), orient="row")
