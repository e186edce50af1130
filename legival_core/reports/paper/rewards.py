"""RM scores against transfer utility (paper section 5.3, Table 2; SPEC section 5).

Spearman (with its p-value) and Pearson (with a percentile bootstrap 95% CI over the units: traces
at trace level, teachers at model level; seeded) between every RM metric and FOTU / RR (trace level:
means over students; SOTU has no trace-level value) and FOTU / SOTU / RR / accuracy (model level:
the report's teacher aggregates), on three subsets: all traces, correct traces only, and the
problems every teacher answered correctly. At model level a teacher's RM score is the mean over its
traces in the subset, and for `all_solved` the transfer metrics are recomputed on that subset.
"""

from __future__ import annotations

import warnings
from collections.abc import Sequence
from typing import TYPE_CHECKING

from legival_core.reports.compute.coverage import COMPUTED, TOO_FEW
from legival_core.reports.compute.missing import Why
from legival_core.reports.compute.rm_scores import rm_scores
from legival_core.reports.compute.stats import spearman
from legival_core.reports.compute.transfer_view import TransferView, all_solved, transfer_view
from legival_core.rewards.models import DEFAULT_MODELS
from legival_core.store import Store

if TYPE_CHECKING:
    import numpy as np
    import polars as pl

TRACE_TARGETS = ("fotu", "rr", "correct")
MODEL_TARGETS = ("fotu", "sotu", "regression_rate", "accuracy")
SUBSETS = ("all", "correct", "all_solved")
N_BOOT = 1000
SEED = 0
BOOT_DRAWS = 4_000_000
"""Most resampled indices held at once by `pearson_ci` (resamples are drawn in chunks)."""


def pearson_ci(x: np.ndarray, y: np.ndarray, n_boot: int = N_BOOT, seed: int = SEED) -> tuple[
        float | None, float | None, float | None, float | None]:
    """(r, p, lo, hi): Pearson r, its p-value and the percentile bootstrap 95% CI over units."""
    import numpy as np
    from scipy import stats

    n = len(x)
    if n < 3 or np.ptp(x) == 0 or np.ptp(y) == 0:
        return None, None, None, None
    res = stats.pearsonr(x, y)
    rng = np.random.default_rng(seed)
    # resamples in chunks of at most ~4 M draws: a trace-level bootstrap over 100k traces stays small
    chunk = max(1, min(n_boot, BOOT_DRAWS // max(n, 1)))
    parts = []
    for start in range(0, n_boot, chunk):
        idx = rng.integers(0, n, size=(min(chunk, n_boot - start), n))
        xs, ys = x[idx], y[idx]
        xc = xs - xs.mean(1, keepdims=True)
        yc = ys - ys.mean(1, keepdims=True)
        with warnings.catch_warnings(), np.errstate(invalid="ignore", divide="ignore"):
            warnings.simplefilter("ignore")
            parts.append((xc * yc).sum(1) / np.sqrt((xc**2).sum(1) * (yc**2).sum(1)))
    rs = np.concatenate(parts) if parts else np.zeros(0)
    rs = np.clip(rs[~np.isnan(rs)], -1.0, 1.0)
    lo, hi = (float(np.percentile(rs, 2.5)), float(np.percentile(rs, 97.5))) if len(rs) else (None, None)
    return float(res.statistic), float(res.pvalue), lo, hi


def _pairs(frame: pl.DataFrame, a: str, b: str) -> tuple[np.ndarray, np.ndarray]:
    import polars as pl

    sub = frame.select(pl.col(a).cast(pl.Float64), pl.col(b).cast(pl.Float64)).drop_nulls().drop_nans()
    return sub[a].to_numpy(), sub[b].to_numpy()


def correlate(frame: pl.DataFrame, rms: Sequence[str], targets: Sequence[str], level: str, subset: str,
              n_boot: int = N_BOOT) -> list[tuple[object, ...]]:
    rows: list[tuple[object, ...]] = []
    for rm in rms:
        for t in targets:
            if rm not in frame.columns or t not in frame.columns:
                continue
            x, y = _pairs(frame, rm, t)
            s = spearman(list(x), list(y))
            r, p, lo, hi = pearson_ci(x, y, n_boot)
            rows.append((level, subset, rm, t, len(x), s.rho, s.p_value, r, p, lo, hi))
    return rows


SCHEMA = {"level": "Utf8", "subset": "Utf8", "rm": "Utf8", "metric": "Utf8", "n": "Int64",
          "spearman": "Float64", "spearman_p": "Float64", "pearson": "Float64", "pearson_p": "Float64",
          "pearson_lo": "Float64", "pearson_hi": "Float64"}


def rm_correlations(store: Store, n_boot: int = N_BOOT, view: TransferView | None = None) -> pl.DataFrame:
    """The long correlation table (level, subset, rm, metric, n, spearman, ..., pearson_hi). `view`:
    the report's own transfer numbers when the caller has them (else read from the store)."""
    import polars as pl

    scores = rm_scores(store)
    rms = [c for c in scores.columns if c != "trace_id"]
    schema = {k: getattr(pl, v) for k, v in SCHEMA.items()}
    if not rms:
        return pl.DataFrame(schema=schema)
    view = view or transfer_view(store)
    traces = view.traces.join(scores, on="trace_id", how="left").with_columns(
        pl.col("correct").cast(pl.Float64))
    solved = all_solved(view.traces)
    subsets = {
        "all": traces,
        "correct": traces.filter(pl.col("correct") == 1.0),
        "all_solved": traces.join(solved, on=["dataset", "problem_id"], how="semi"),
    }
    rows: list[tuple[object, ...]] = []
    for name, sub in subsets.items():
        targets = TRACE_TARGETS if name == "all" else tuple(t for t in TRACE_TARGETS if t != "correct")
        rows += correlate(sub, rms, targets, "trace", name, n_boot)
        by_teacher = view.by_teacher if name != "all_solved" else _solved_teachers(store, solved)
        model = sub.group_by("teacher").agg(pl.col(c).mean() for c in rms).join(
            by_teacher.select("teacher", *[c for c in MODEL_TARGETS if c in by_teacher.columns]),
            on="teacher", how="left")
        rows += correlate(model, rms, MODEL_TARGETS, "model", name, n_boot)
    return pl.DataFrame(rows, orient="row", schema=schema)


def _solved_teachers(store: Store, solved: pl.DataFrame) -> pl.DataFrame:
    """Teacher aggregates recomputed on the problems every teacher solved."""
    import polars as pl

    key = pl.concat_str("dataset", "problem_id", separator="\x1f")
    keep = solved.select(key.alias("k"))["k"].to_list()
    return transfer_view(store, key.is_in(keep)).by_teacher


def rm_report_table(store: Store, view: TransferView, why: Why, n_boot: int = N_BOOT) -> pl.DataFrame:
    """rm_correlations.csv of the report (the paper's RM tables: trace-level rows, Fig. 7 for FOTU, and
    the model-level rows on the teachers' mean RM scores, Table 6), with `status` and `detail`: a
    correlation that cannot be computed says why, and a registered RM with no score gets one row
    (level, subset and metric empty) saying whether `legival rm` has not run or its model is not here."""
    import polars as pl

    corr = rm_correlations(store, n_boot, view).with_columns(
        pl.when(pl.col("spearman").is_null()).then(pl.lit(TOO_FEW)).otherwise(pl.lit(COMPUTED)).alias("status"),
        pl.when(pl.col("spearman").is_null())
        .then(pl.lit("fewer than 3 pairs with both values, or one side constant"))
        .otherwise(pl.lit("")).alias("detail"))
    done = set(corr["rm"].to_list())
    rows = []
    for spec in DEFAULT_MODELS:
        for column, stored in zip(spec.columns(), spec.metric_names(), strict=True):
            if stored not in done:
                status, detail = why.missing(None, column, "rewards")
                rows.append({"rm": stored, "status": status, "detail": detail})
    if rows:
        corr = pl.concat([corr, pl.DataFrame(rows, schema={c: corr.schema[c] for c in ("rm", "status", "detail")})],
                         how="diagonal")
    return corr.select(*SCHEMA, "status", "detail")
