"""Shared CLI plumbing: one error style, progress bars on a terminal, the closing JSON line."""

from __future__ import annotations

import json
import sys
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from typing import Any, NoReturn

from rich.console import Console
from rich.markup import escape
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TaskID, TextColumn, TimeElapsedColumn
from rich.segment import Segment

from legival_core.visible import visible


class ShownConsole(Console):
    """A rich console that shows untrusted text, never obeys it: every string it renders (a message, a
    table cell, markup's text) passes through `legival_core.visible.visible` before layout, and every
    text segment once more on the way out (a `Text` built elsewhere), so no control, bidi or invisible
    character of a trace, a name or an input reaches the terminal raw (docs/security.md, "Terminals").
    Rich's own control segments (a progress bar's cursor moves) pass as they are."""

    def render_str(self, text: str, **kwargs: Any) -> Any:
        return super().render_str(visible(text, newlines=True), **kwargs)

    def _render_buffer(self, buffer: Iterable[Segment]) -> str:
        return super()._render_buffer(
            seg if seg.control else Segment(visible(seg.text, newlines=True), seg.style, seg.control) for seg in buffer)


err_console = ShownConsole(stderr=True)
out_console = ShownConsole()


def emit_summary(summary: dict[str, Any]) -> None:
    """The last line of standard output of every command: one JSON object, with `units_failed` (units that
    failed alone, per stage, with the most frequent reason: docs/CLI.md "Failure contract") whenever a
    stage ran. When a stage tried units and every one failed, the command then exits 1."""
    from legival_core.stages.isolation import current

    ledger = current().ledger
    if ledger:
        summary = {**summary, "units_failed": sum(len(s.failed) for s in ledger),
                   "failed_by_stage": {s.stage: _failed_entry(s) for s in ledger if s.failed or s.skipped}}
        for s in ledger:
            if s.failed or s.skipped:
                err_console.print(f"failed: {len(s.failed)} {s.stage} unit(s){_skipped_note(s)}"
                                  f"{f' ({_top_reason(s)})' if s.failed else ''}",
                                  markup=False, highlight=False, soft_wrap=True)
    sys.stdout.flush()
    print(json.dumps(summary, sort_keys=True, default=str), flush=True)
    dead = [s for s in ledger if s.attempted and len(s.failed) == s.attempted]
    if dead:
        fail(f"every unit failed in {', '.join(f'{s.stage} ({s.attempted})' for s in dead)}: nothing was "
             "computed there; the reasons are stored (`legival report` coverage), fix the cause and rerun with "
             "--retry-failed", code=1)


def _failed_entry(s: Any) -> dict[str, Any]:
    return {"failed": len(s.failed), "skipped_failed_before": s.skipped, "reason": _top_reason(s) if s.failed else None}


def _skipped_note(s: Any) -> str:
    return f", {s.skipped} skipped (failed before; --retry-failed computes them again)" if s.skipped else ""


def _top_reason(s: Any) -> str:
    from collections import Counter

    (reason, n), = Counter(f.reason for f in s.failed).most_common(1)
    return reason if n == len(s.failed) else f"{reason}; and {len(s.failed) - n} other reasons"


class Bar:
    """A progress bar handle: call it to advance, or `update` to set the position.

    Without a terminal on stderr it does nothing, so logs and CI output stay clean."""

    def __init__(self, progress: Progress | None, task: TaskID | None) -> None:
        self._progress, self._task = progress, task

    def __call__(self, n: int = 1) -> None:
        if self._progress is not None and self._task is not None and n:
            self._progress.advance(self._task, n)

    def update(self, done: int | None = None, total: int | None = None, description: str | None = None) -> None:
        if self._progress is None or self._task is None:
            return
        self._progress.update(self._task, completed=done, total=total, description=description)

    def phase(self, name: str, done: int, total: int) -> None:
        self.update(done=done, total=total, description=name)


@contextmanager
def progress_bar(description: str, total: int | None = None) -> Iterator[Bar]:
    if not err_console.is_terminal:
        yield Bar(None, None)
        return
    with Progress(
        TextColumn("[bold]{task.description}"),
        BarColumn(),
        MofNCompleteColumn(),
        TimeElapsedColumn(),
        console=err_console,
    ) as prog:
        yield Bar(prog, prog.add_task(description, total=total))


def fail(message: str, code: int = 2) -> NoReturn:
    from legival.lifecycle.signals import claim_line, interruption

    if (signalled := interruption()) is not None:  # after a signal, its line and status (legival/lifecycle/signals.py)
        message, code = signalled
        if not claim_line():
            raise SystemExit(code)
    err_console.print(f"[bold red]error:[/] {escape(message)}", markup=True, highlight=False, soft_wrap=True)
    raise SystemExit(code)
