"""Per-trace metrics, registered by name (see legival_core.registry)."""

from legival_core.metrics.efficiency import (
    DEFAULT_TAU,
    SWEEP_THRESHOLDS,
    backtracking_fraction,
    lexical_backtracking,
    lexical_backtracking_steps,
    max_prev_similarity,
    redundancy,
    redundancy_sweep,
    step_len,
)
from legival_core.registry import register
from legival_core.tokens import token_len

register("metric", "token_len", token_len)

__all__ = [
    "DEFAULT_TAU",
    "SWEEP_THRESHOLDS",
    "backtracking_fraction",
    "lexical_backtracking",
    "lexical_backtracking_steps",
    "max_prev_similarity",
    "redundancy",
    "redundancy_sweep",
    "step_len",
    "token_len",
]
