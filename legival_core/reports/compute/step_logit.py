"""The step effects' logistic model (docs/step_events.md, "The logistic model"): per (scope, outcome) one
`statsmodels` Logit with every feature of a segment together, standard errors clustered by problem.

Kept apart from `step_effects` (the 2x2 tables) because the model must never raise on any store: two
features that carry the same information (a store where every step adds the same number of prompt
tokens, so `tokens_added` = c x `n_steps`) make the design matrix singular, and statsmodels then
returns standard errors of ~1e7 (a pseudo-inverse) whose interval overflows `math.exp`. So:

- a term that adds no rank to the standardised design (intercept and the terms before it, in
  `LOGIT_TERMS` order) is left out, its row saying "not in the model: collinear with <terms>" (the
  kept terms that span it), and the model is fitted on the others: the estimate of the kept term is
  the one the pair shares, and the reader is told which term stands for both;
- a fit that statsmodels flags (perfect separation, a Hessian it cannot invert, no convergence) or that
  returns a standard error that is not finite or over `MAX_STD_ERR` (near-collinear features,
  quasi-separation: the interval says nothing) gives every row of the model "too few events: ..." with
  the reason, never numbers that mean nothing;
- every exp is computed safely (`safe_exp`: None past a float's range).
"""

from __future__ import annotations

import math
import warnings
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import numpy as np
    import polars as pl

EVENTS_PER_PARAMETER = 10
"""The logistic model needs at least this many events, and as many non-events, per parameter."""
LOGIT_BINARY = ("backtracking", "answer_stated", "self_check")
LOGIT_CONTINUOUS = ("max_cos", "tokens_added", "position", "n_steps")
LOGIT_TERMS = ("intercept", *LOGIT_BINARY, *LOGIT_CONTINUOUS)
MAX_STD_ERR = 100.0
"""A standard error over this (on a flag or a standardised feature: an odds ratio interval of
exp(+-196)) says the model is not identified (near-collinear features, quasi-separation)."""
RANK_TOL = 1e-8
"""A term adds rank to the standardised design when its residual on the columns before it keeps more
than this share of its norm (exactly collinear terms leave ~1e-15)."""
Z95 = 1.959963984540054


def LOGIT_SCHEMA() -> dict[str, pl.DataType]:  # noqa: N802 (a constant, built when polars is imported)
    import polars as pl

    f, i, s = pl.Float64(), pl.Int64(), pl.Utf8()
    return {"scope": s, "outcome": s, "term": s, "status": s, "unit": s, "coef": f, "std_err": f, "odds_ratio": f,
            "or_ci_low": f, "or_ci_high": f, "p_value": f, "n": i, "n_events": i, "n_params": i, "n_problems": i}


def safe_exp(x: float) -> float | None:
    """exp(x), or None where it is not a finite float (x over ~709, or x not finite)."""
    if not math.isfinite(x) or x > 709.0:
        return None
    return math.exp(x)


def fit_rows(outcome: str, risk: pl.DataFrame, null_reason: dict[str, str]) -> list[dict[str, object]]:
    """One logistic model's rows, one per `LOGIT_TERMS`: the features that are non-null somewhere, not
    constant and not collinear with the ones before them enter it, on the segments complete in them;
    the others say why they are out (`null_reason[t]`: why `t` is null for every segment). `risk`: the
    segments that could have `outcome`, with `_pi` (the problem) and the features."""
    import numpy as np
    import polars as pl

    why: dict[str, str] = {}
    units: dict[str, str | None] = {t: "flag (1 = present)" for t in LOGIT_BINARY}
    terms = []
    for t in (*LOGIT_BINARY, *LOGIT_CONTINUOUS):
        if risk.height and risk[t].null_count() == risk.height:
            why[t] = "not in the model: " + null_reason.get(t, "too few events: no segment")
        else:
            terms.append(t)
    data = risk.drop_nulls(terms)
    kept = []
    for t in terms:
        values = data[t].cast(pl.Float64).to_numpy()
        if len(values) > 1 and float(values.std()) > 0.0:
            kept.append(t)
        else:
            why[t] = "not in the model: constant"
    n = data.height
    columns = {t: _standard(data[t].cast(pl.Float64).to_numpy(), t, units) for t in kept} if n else {}
    kept = _independent(columns, why) if n else kept
    y = (data["outcome"] == outcome).to_numpy().astype(np.float64)
    n_events, n_params = int(y.sum()), 1 + len(kept)
    counts = {"n": n, "n_events": n_events, "n_params": n_params, "n_problems": data["_pi"].n_unique() if n else 0}
    fewest = min(n_events, n - n_events)
    fit: dict[str, tuple[float | None, ...]] = {}
    if n == 0:
        status = "too few events: no segment"
    elif fewest < EVENTS_PER_PARAMETER * n_params:
        status = (f"too few events: {fewest} events or non-events for {n_params} parameters (fewer than "
                  f"{EVENTS_PER_PARAMETER} per parameter)")
    else:
        x = np.column_stack([np.ones(n)] + [columns[t] for t in kept])
        result = _logit(y, x, data["_pi"].to_numpy())
        if isinstance(result, str):
            status = f"too few events: {result}"
        else:
            status = "computed"
            for i, term in enumerate(("intercept", *kept)):
                b, se, p = (float(v[i]) for v in result)
                fit[term] = (b, se, safe_exp(b), safe_exp(b - Z95 * se), safe_exp(b + Z95 * se), p)
    names = ("coef", "std_err", "odds_ratio", "or_ci_low", "or_ci_high", "p_value")
    return [{"term": term, "status": why.get(term, status) if n else status,
             "unit": units.get(term) if term != "intercept" else None,
             **dict(zip(names, fit.get(term, (None,) * len(names)), strict=True)), **counts} for term in LOGIT_TERMS]


def _independent(columns: dict[str, np.ndarray], why: dict[str, str]) -> list[str]:
    """The terms (in order) that add rank to the design (the intercept, then the terms kept before);
    each other one gets "not in the model: collinear with <the kept terms that span it>" in `why`."""
    import numpy as np

    kept: list[str] = []
    for t, v in columns.items():
        basis = np.column_stack([np.ones(len(v))] + [columns[k] for k in kept])
        coef, *_ = np.linalg.lstsq(basis, v, rcond=None)
        residual = v - basis @ coef
        if float(np.linalg.norm(residual)) > RANK_TOL * max(float(np.linalg.norm(v)), 1.0):
            kept.append(t)
            continue
        spans = [k for k, c in zip(kept, coef[1:], strict=True) if abs(float(c)) > 1e-6] or ["the intercept"]
        why[t] = f"not in the model: collinear with {', '.join(spans)}"
    return kept


def _standard(v: np.ndarray, term: str, units: dict[str, str | None]) -> np.ndarray:
    if term in LOGIT_BINARY:
        return v
    mean, sd = float(v.mean()), float(v.std())
    units[term] = f"1 sd = {sd:.4g} (mean {mean:.4g})"
    out: np.ndarray = (v - mean) / sd
    return out


def _logit(y: np.ndarray, x: np.ndarray, groups: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray] | str:
    """statsmodels' Logit, standard errors clustered by problem; the reason (a string) when the fit
    cannot be trusted: any statsmodels warning (separation, a singular Hessian, no convergence), a
    numerical error, or a standard error not finite or over `MAX_STD_ERR`."""
    import numpy as np
    import statsmodels.api as sm
    from statsmodels.tools.sm_exceptions import (
        ConvergenceWarning,
        HessianInversionWarning,
        PerfectSeparationError,
        PerfectSeparationWarning,
    )

    with warnings.catch_warnings():
        for w in (PerfectSeparationWarning, ConvergenceWarning, HessianInversionWarning):
            warnings.simplefilter("error", w)
        warnings.simplefilter("ignore", RuntimeWarning)
        try:
            res = sm.Logit(y, x).fit(disp=0, method="newton", maxiter=100, cov_type="cluster",
                                     cov_kwds={"groups": groups})
            coef, se, p = np.asarray(res.params), np.asarray(res.bse), np.asarray(res.pvalues)
        except (PerfectSeparationError, PerfectSeparationWarning):
            return "the model did not converge (separation)"
        except ConvergenceWarning:
            return "the model did not converge"
        except HessianInversionWarning:
            return "the model is not identified (its Hessian cannot be inverted: collinear features)"
        except (np.linalg.LinAlgError, ValueError, OverflowError, FloatingPointError) as e:
            return f"the model could not be fitted ({type(e).__name__})"
    if not res.mle_retvals.get("converged", False) or not np.isfinite(coef).all():
        return "the model did not converge (separation)"
    if not np.isfinite(se).all() or float(se.max()) > MAX_STD_ERR:
        return (f"the model is not identified (a standard error over {MAX_STD_ERR:g}: near-collinear features "
                "or separation)")
    return coef, se, p
