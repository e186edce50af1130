"""Why a teacher-level number is missing, from `coverage.csv` (the paper tables' `status`/`detail`).

A table of the paper figures keeps its rows whatever ran; a cell it cannot fill says why, with the
statuses of `coverage.py`: `not run` (detail: the command that computes it), `unavailable` (detail:
the stored reason, e.g. the model is not installed), `too few traces` (detail: why).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from legival_core.reports.compute.coverage import COMPUTED, NOT_RUN, TOO_FEW, UNAVAILABLE, stage_command

if TYPE_CHECKING:
    import polars as pl

_PRIORITY = {UNAVAILABLE: 0, TOO_FEW: 1, NOT_RUN: 2}


@dataclass(slots=True)
class Why:
    """(teacher, metric) -> the statuses of its (teacher, dataset) cells in coverage.csv."""

    cells: dict[tuple[str, str], list[tuple[str, str]]] = field(default_factory=dict)
    stages: dict[str, str] = field(default_factory=dict)

    @classmethod
    def of(cls, coverage: pl.DataFrame | None) -> Why:
        why = cls()
        if coverage is None:
            return why
        for teacher, metric, stage, status, detail in coverage.select(
                "teacher", "metric", "stage", "status", "detail").iter_rows():
            why.cells.setdefault((teacher, metric), []).append((status, detail or ""))
            why.stages.setdefault(metric, stage)
        return why

    def missing(self, teacher: str | None, metric: str, stage: str | None = None) -> tuple[str, str]:
        """(status, detail) of a value that is not there: the most telling non-computed status of the
        teacher's cells (unavailable, then too few traces, then not run); over all teachers when
        `teacher` is None."""
        cells = self.cells.get((teacher, metric), []) if teacher is not None else [
            c for (_t, m), cs in self.cells.items() if m == metric for c in cs]
        bad = sorted((c for c in cells if c[0] != COMPUTED), key=lambda c: _PRIORITY.get(c[0], 3))
        if bad:
            return bad[0]
        if cells:
            return TOO_FEW, "undefined at teacher level"
        return NOT_RUN, stage_command(stage or self.stages.get(metric, ""))

    def status(self, teacher: str | None, metric: str, value: object, stage: str | None = None) -> tuple[str, str]:
        """("computed", "") for a defined value, else `missing`."""
        if value is not None and value == value:
            return COMPUTED, ""
        return self.missing(teacher, metric, stage)

    def reason(self, teacher: str | None, metric: str, stage: str | None = None) -> str:
        """`metric: status (detail)` of a missing value, for a `;`-joined list."""
        status, detail = self.missing(teacher, metric, stage)
        return f"{metric}: {status}" + (f" ({detail})" if detail else "")

    def worst(self, teacher: str | None, metrics: list[str]) -> tuple[str, str]:
        """(status, detail) of a value resting on several missing metrics: the most telling status
        among them (unavailable first), and each metric's reason, `;`-joined."""
        got = [self.missing(teacher, m) for m in metrics]
        if not got:
            return TOO_FEW, ""
        status = min((s for s, _d in got), key=lambda s: _PRIORITY.get(s, 3))
        return status, "; ".join(f"{m}: {s}" + (f" ({d})" if d else "") for m, (s, d) in zip(metrics, got, strict=True))
