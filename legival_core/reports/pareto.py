"""Pareto frontier of teachers on (efficiency, transfer) (SPEC section 5)."""

from __future__ import annotations

from collections.abc import Sequence

from legival_core.metrics.base import Direction

FRONTIERS: tuple[tuple[str, str, str], ...] = (
    ("token_len_median", "fotu", "on_pareto_frontier"),
    ("redundancy", "sotu", "on_pareto_frontier_redundancy_sotu"),
)
"""(x metric, y metric, output column) of the frontiers in teacher_metrics.csv (SPEC section 5: cost
against transfer); each axis's better direction is the registry's. The dashboard offers every
ranked metric as an axis."""


def pareto_frontier(
    x: Sequence[float | None], y: Sequence[float | None], x_dir: Direction = "lower", y_dir: Direction = "higher"
) -> list[bool | None]:
    """True for a point that no other point dominates: none is at least as good on both axes and
    strictly better on one. Points with an undefined coordinate get None and dominate nothing; two
    identical points are both on the frontier."""
    sx = 1.0 if x_dir == "higher" else -1.0
    sy = 1.0 if y_dir == "higher" else -1.0
    pts = [None if a is None or b is None or a != a or b != b else (sx * a, sy * b) for a, b in zip(x, y, strict=True)]
    out: list[bool | None] = []
    for i, p in enumerate(pts):
        if p is None:
            out.append(None)
            continue
        dominated = any(
            q is not None and j != i and q[0] >= p[0] and q[1] >= p[1] and (q[0] > p[0] or q[1] > p[1])
            for j, q in enumerate(pts)
        )
        out.append(not dominated)
    return out
