"""What every flow shares: loading the spec with the CLI's overrides, and the driver session."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from legival_core.spec import BenchmarkSpec, Teacher, load_spec

_depth = 0
_depth_lock = threading.Lock()


def load_run(spec: str, db: str | None = None, out: str | None = None) -> tuple[BenchmarkSpec, str, str]:
    """The spec, the store path and the report directory (options override the spec's)."""
    s = load_spec(spec)
    return s, str(Path(db).resolve() if db else s.store), str(Path(out).resolve() if out else s.report.out)


def selected_teachers(s: BenchmarkSpec, names: list[str] | None) -> list[Teacher]:
    return list(s.teachers) if not names else [s.teacher(n) for n in names]


@contextmanager
def driver_session() -> Iterator[None]:
    """The outermost flow closes the store and the engine pool (subflows share them)."""
    global _depth
    from tasks._driver import close_stores
    from tasks.engines import shutdown_pools

    with _depth_lock:
        _depth += 1
    try:
        yield
    finally:
        with _depth_lock:
            _depth -= 1
            last = _depth == 0
        if last:
            close_stores()
            shutdown_pools()
