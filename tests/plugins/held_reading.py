"""Holds `legival ingest` while it reads, where a test needs a signal to land (loaded through
`LEGIVAL_PLUGINS`, in the command's own process: tests/cli/test_reader_signals.py).

`LEGIVAL_TEST_READ_HOLD` says where; once there, the hold appends a line to the file
`LEGIVAL_TEST_READ_MARK` and waits for good (only the signal, then the command's way out, end it):

- `call:MODULE:NAME` (NAME may be `Class.method`): inside a reader, in its library: the function is
  replaced, in MODULE and where it is defined (where the library's own callers look it up), by one that
  holds at its first call. A coroutine function is replaced by a coroutine function: it then holds
  inside the library's event loop, as one of its steps.
- The source `held` (`legival ingest FILE --from held`) reads the first record of FILE (Legi-Val's
  JSONL) and then holds where a library waits:
  `asyncio-callback`: in a plain callback of an event loop, whose future the loop waits for (asyncio
  logs and swallows any exception of a callback but KeyboardInterrupt and SystemExit);
  `thread`: the main thread waits for a worker thread of an executor that never ends (leaving the
  `with`, the executor joins it);
  `native`: in a C call that does not return on a signal (relocking a mutex it holds);
  `swallow`: in code that catches every exception, signals included, and waits on.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import importlib
import inspect
import os
import sys
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from legival_core.readers.sources import OWN, Record, SourceInfo, SourceOptions
from legival_core.registry import entry, register

HOLD = os.environ.get("LEGIVAL_TEST_READ_HOLD", "")


def _mark(where: str) -> None:
    mark = os.environ.get("LEGIVAL_TEST_READ_MARK")
    if mark:
        with open(mark, "a", encoding="utf-8") as f:
            f.write(where + "\n")


def hold(where: str) -> None:
    """Mark, then wait for good (interruptibly: a signal's handler runs here)."""
    _mark(where)
    forever = threading.Event()
    while True:
        forever.wait()


# ------------------------------------------------------------------------------------- inside a library


def _holding(fn: Any, where: str) -> Any:
    first = [True]

    def due() -> bool:
        was, first[0] = first[0], False
        return was

    if inspect.iscoroutinefunction(fn):
        @functools.wraps(fn)
        async def held_async(*args: Any, **kwargs: Any) -> Any:
            if due():
                hold(where)
            return await fn(*args, **kwargs)

        return held_async

    @functools.wraps(fn)
    def held(*args: Any, **kwargs: Any) -> Any:
        if due():
            hold(where)
        return fn(*args, **kwargs)

    return held


def _hold_in_call(spec: str) -> None:
    _, module_name, name = spec.split(":")
    owner: Any = importlib.import_module(module_name)
    *path, attr = name.split(".")
    for part in path:
        owner = getattr(owner, part)
    original = getattr(owner, attr)
    wrapped = _holding(original, spec)
    setattr(owner, attr, wrapped)
    defining = sys.modules.get(getattr(original, "__module__", "") or "")
    if not path and defining is not None and getattr(defining, attr, None) is original:
        setattr(defining, attr, wrapped)


if HOLD.startswith("call:"):
    _hold_in_call(HOLD)


# ------------------------------------------------------------------------------------- the `held` source


def _in_a_callback() -> None:
    async def main() -> None:
        loop = asyncio.get_running_loop()
        done = loop.create_future()

        def callback() -> None:  # a plain callback, as a library's completion callback runs
            hold("asyncio-callback")
            done.set_result(None)

        loop.call_soon(callback)
        await done

    asyncio.run(main())


def _waiting_for_a_thread() -> None:
    from concurrent.futures import ThreadPoolExecutor

    never = threading.Event()
    with ThreadPoolExecutor(1, thread_name_prefix="held-library") as pool:
        stuck = pool.submit(never.wait)  # a worker whose I/O never completes
        _mark("thread")
        stuck.result()


def _in_a_c_call() -> None:
    import ctypes

    libc = ctypes.CDLL(None)  # a CDLL call releases the GIL while it runs
    mutex = ctypes.create_string_buffer(64)  # zeroed: a default (normal) pthread mutex, unlocked
    libc.pthread_mutex_lock(mutex)
    _mark("native")
    libc.pthread_mutex_lock(mutex)  # relocked by its holder: waits for good; a signal does not end the wait


def _swallowing() -> None:
    while True:
        with contextlib.suppress(BaseException):  # a library that swallows everything, signals included
            hold("swallow")


PLACES = {"asyncio-callback": _in_a_callback, "thread": _waiting_for_a_thread, "native": _in_a_c_call,
          "swallow": _swallowing}


def read_held(path: Path, options: SourceOptions) -> Iterator[Record]:
    records = entry("format", OWN).obj(path, options)
    yield next(records)
    PLACES[HOLD]()
    yield from records


register("format", "held", read_held, meta=SourceInfo(
    unit="line", sniff=lambda _path: False, order=999,
    description="(tests) the first record of a Legi-Val JSONL file, then a hold where a library waits"))
