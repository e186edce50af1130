"""The percentile interval of bootstrap replicates (SPEC section 5): one definition for the report's
confidence intervals (`reports.compute.bootstrap`) and the run records' intervals of a difference
(`runs`)."""

from __future__ import annotations

import warnings
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import numpy as np

CI_LEVEL = 0.95


def percentile_interval(samples: np.ndarray, level: float = CI_LEVEL) -> tuple[np.ndarray, np.ndarray]:
    """Percentile interval per column over the resamples (rows), NaN resamples ignored."""
    import numpy as np

    alpha = (1 - level) / 2
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        return (np.nanpercentile(samples, 100 * alpha, axis=0), np.nanpercentile(samples, 100 * (1 - alpha), axis=0))


def interval_1d(samples: np.ndarray, level: float = CI_LEVEL, min_defined: int = 1) -> tuple[float | None, float | None]:
    """The percentile interval of one statistic's replicates, its non-finite ones ignored; (None, None)
    with fewer than `min_defined` finite replicates (what every caller shows as "no interval")."""
    import numpy as np

    finite = np.asarray(samples, dtype=float)
    finite = finite[np.isfinite(finite)]
    if finite.size < max(1, min_defined):
        return None, None
    lo, hi = percentile_interval(finite[:, None], level)
    return float(lo[0]), float(hi[0])
