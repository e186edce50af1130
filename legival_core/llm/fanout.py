"""Many model calls at once, on daemon threads: a cancel never waits for a call in flight.

`concurrent.futures.ThreadPoolExecutor` joins its threads when its `with` block ends (an exception
included) and again when the interpreter exits: a Ctrl-C or a SIGTERM while an endpoint held a request
open (a judge API up to its 120 s timeout, a teacher server that hangs) kept the command alive that
long, its output open, past the cancel's grace. Here each call runs on a daemon thread; when the caller
stops waiting (an exception, a signal raised in it), the calls not started yet are dropped and the
ones in flight are abandoned: their answers are never used, and the process exits without them.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Sequence
from typing import TypeVar

WAKE_S = 0.25
"""Seconds between two wake-ups of the waiting caller (module docstring, `fan_out`)."""

T = TypeVar("T")
R = TypeVar("R")


def fan_out(call: Callable[[T], R], items: Sequence[T], workers: int,
            on_done: Callable[[int, R], None] | None = None, name: str = "llm") -> list[R]:
    """`call(item)` for every item, at most `workers` at a time; the results in the items' order.
    `on_done(index, result)` runs in the caller's thread as each call finishes. A call that raises:
    the first such exception (in finishing order) is raised here, and no further call starts."""
    n = len(items)
    results: list[R | None] = [None] * n
    errors: dict[int, BaseException] = {}
    finished: list[int] = []
    cond = threading.Condition()
    state = {"next": 0, "stop": False}

    def work() -> None:
        while True:
            with cond:
                if state["stop"] or state["next"] >= n:
                    return
                i = state["next"]
                state["next"] = i + 1
            try:
                r = call(items[i])
            except BaseException as e:  # noqa: BLE001 - handed to the caller
                with cond:
                    errors[i] = e
                    finished.append(i)
                    cond.notify_all()
                continue
            with cond:
                results[i] = r
                finished.append(i)
                cond.notify_all()

    for k in range(max(1, min(workers, n))):
        threading.Thread(target=work, name=f"{name}-{k}", daemon=True).start()
    seen = 0
    try:
        while seen < n:
            with cond:
                while len(finished) == seen:
                    # a timeout, so that this thread runs Python's signal handlers (Ctrl-C, SIGTERM raise
                    # here) even when the kernel delivered the signal to a worker thread
                    cond.wait(WAKE_S)
                new, seen = finished[seen:], len(finished)
            for i in new:
                if i in errors:
                    raise errors[i]
                if on_done is not None:
                    on_done(i, results[i])  # type: ignore[arg-type]
    except BaseException:
        with cond:
            state["stop"] = True
        raise
    return results  # type: ignore[return-value]
