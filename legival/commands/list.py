"""`legival list [KIND]`: what the registry holds (datasets, graders, metrics, quality groups, backends,
judges, stages, trace formats, hint cues)."""

from __future__ import annotations

from typing import Annotated, Any

import typer

from legival.app import app
from legival.console import emit_summary, fail, out_console

_PLURAL = {"datasets": "dataset", "graders": "grader", "metrics": "metric", "quality": "quality",
           "backends": "backend", "judges": "judge", "stages": "stage", "formats": "format", "cues": "cue"}
_LABEL = {"quality": "quality groups"}
"""How a kind is headed and keyed in the summary (default: the kind + "s")."""


@app.command("list")
def list_registry(
    kind: Annotated[str | None, typer.Argument(help="datasets | graders | metrics | quality | backends | judges | stages "
                                                    "| formats | cues (default: all)")] = None,
) -> None:
    """Print every registered entry with its one-line description (metrics: unit and direction)."""
    from legival_core.registry import KINDS, entries

    kinds = list(KINDS) if kind is None else [_PLURAL.get(kind.strip().lower(), kind.strip().lower())]
    unknown = [k for k in kinds if k not in KINDS]
    if unknown:
        fail(f"unknown kind {kind!r}; choose one of {', '.join(_PLURAL)}")
    summary: dict[str, Any] = {"command": "list"}
    for k in kinds:
        rows = [_row(k, e) for e in _ordered(k, entries(k))]  # type: ignore[arg-type]
        _print(k, rows)
        summary[_LABEL.get(k, k + "s").replace(" ", "_")] = [r["name"] for r in rows]
    emit_summary(summary)


def _ordered(kind: str, found: list[Any]) -> list[Any]:
    """Stages in the order a run takes them (their `needs`); every other kind by name."""
    if kind != "stage":
        return found
    from legival_core.stages.registered import stages_in_order

    rank = {info.name: i for i, info in enumerate(stages_in_order())}
    return sorted(found, key=lambda e: rank[e.name])


def _row(kind: str, e: Any) -> dict[str, str]:
    row = {"name": e.name, "description": e.description}
    meta = e.meta
    if kind == "metric":
        row.update(unit=meta.unit, direction={"higher": "higher is better", "lower": "lower is better"}.get(
            meta.direction or "", "-"), level=meta.level, section=meta.section, stage=meta.stage)
    elif kind == "backend":
        row["dtypes"] = ", ".join(getattr(meta, "dtypes", ()) or ())
    elif kind == "stage":
        row["command"] = getattr(meta, "command", "")
        if meta.needs:
            row["needs"] = ", ".join(meta.needs)
    elif kind == "format":
        row["unit"] = meta.unit if isinstance(meta.unit, str) else "line or row"
        row["needs"] = f"pip install 'legival[{meta.extra}]'" if meta.extra else "the base install"
        if meta.options:
            row["options"] = ", ".join("--map" if o == "mapping" else f"--{o}" for o in meta.options)
    elif kind == "quality":
        row["metrics"] = ", ".join(e.obj.metric_names)
        row["datasets"] = ", ".join(e.obj.datasets) if e.obj.datasets else "every dataset"
    if e.aliases:
        row["aliases"] = ", ".join(e.aliases)
    return row


def _print(kind: str, rows: list[dict[str, str]]) -> None:
    """One line per entry, aligned columns: readable in any terminal width and in a pipe."""
    out_console.print(f"{_LABEL.get(kind, kind + 's')} ({len(rows)})", markup=False, highlight=False)
    keys = [k for k in ("name", "unit", "direction", "dtypes", "command") if any(k in r for r in rows)]
    width = {k: max((len(r.get(k, "")) for r in rows), default=0) for k in keys}
    for r in rows:
        head = "  ".join(r.get(k, "").ljust(width[k]) for k in keys)
        tail = r["description"]
        extra = [f"{k} {r[k]}" for k in ("section", "stage", "metrics", "datasets", "needs", "options", "aliases")
                 if r.get(k)]
        if extra:
            tail += f" ({'; '.join(extra)})"
        out_console.print(f"  {head}  {tail}", markup=False, highlight=False, soft_wrap=True)
