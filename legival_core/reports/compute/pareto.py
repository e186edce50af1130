"""Pareto frontier of teachers on (efficiency, transfer) (SPEC section 5)."""

from __future__ import annotations

import math
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


# --- label placement (pareto.png; the dashboard's SVG runs the same rule in JavaScript) ---------------

Box = tuple[float, float, float, float]
"""x0, y0, x1, y1 in pixels, y growing downwards."""

LABEL_RINGS: tuple[float, ...] = (3, 12, 24, 40, 60, 85, 115, 150, 190)
"""Distances (px) from a marker's edge at which a label is tried, nearest first; from the third ring on
the label gets a leader line to its point."""
LABEL_ANGLES: tuple[float, ...] = (-45, 0, -135, 45, 180, 135, -90, 90, -22.5, 22.5, -157.5, 157.5,
                                   -67.5, -112.5, 67.5, 112.5)
"""Directions tried on each ring (degrees, y down): upper right first."""


def place_labels(anchors: Sequence[tuple[float, float]], sizes: Sequence[tuple[float, float]], bounds: Box,
                 radius: float = 6.0, pad: float = 2.0) -> list[tuple[Box, bool]]:
    """Greedy collision avoidance: each label (in the order of its point, top to bottom) takes the first
    position, ring by ring and direction by direction, that stays inside `bounds` and overlaps no label
    placed before and no point's marker; when none is free, the one overlapping least. Returns per
    label its box and whether it needs a leader line (placed beyond the second ring)."""
    markers = [(x - radius - 1, y - radius - 1, x + radius + 1, y + radius + 1) for x, y in anchors]
    placed: list[Box] = []
    out: list[tuple[Box, bool] | None] = [None] * len(anchors)
    for i in sorted(range(len(anchors)), key=lambda j: (anchors[j][1], anchors[j][0])):
        (ax, ay), (w, h) = anchors[i], sizes[i]
        best: tuple[float, Box, bool] | None = None
        for ring, dist in enumerate(LABEL_RINGS):
            for angle in LABEL_ANGLES:
                c, s = math.cos(math.radians(angle)), math.sin(math.radians(angle))
                px, py = ax + (radius + dist) * c, ay + (radius + dist) * s
                x0 = px if c > 0.38 else px - w if c < -0.38 else px - w / 2
                y0 = py if s > 0.38 else py - h if s < -0.38 else py - h / 2
                box = (x0, y0, x0 + w, y0 + h)
                grown = (x0 - pad, y0 - pad, x0 + w + pad, y0 + h + pad)
                cost = sum(_overlap(grown, b) for b in placed) + sum(
                    _overlap(box, m) for j, m in enumerate(markers) if j != i) + 10 * _outside(box, bounds)
                if best is None or cost < best[0]:
                    best = (cost, box, ring >= 2)
                if cost == 0:
                    break
            if best is not None and best[0] == 0:
                break
        assert best is not None
        placed.append(best[1])
        out[i] = (best[1], best[2])
    return [o for o in out if o is not None]


def _overlap(a: Box, b: Box) -> float:
    w = min(a[2], b[2]) - max(a[0], b[0])
    h = min(a[3], b[3]) - max(a[1], b[1])
    return w * h if w > 0 and h > 0 else 0.0


def _outside(box: Box, bounds: Box) -> float:
    area = (box[2] - box[0]) * (box[3] - box[1])
    return area - _overlap(box, bounds)
