"""Large collections: building millions of small objects at once, and sampling a few of them evenly."""

from __future__ import annotations

import gc
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from typing import TypeVar

T = TypeVar("T")


@contextmanager
def gc_paused() -> Iterator[None]:
    """CPython's cyclic garbage collector paused for a block that only allocates acyclic objects.

    Every few hundred allocations of container objects (tuples, lists, dataclasses) the collector
    walks the young objects, and each full collection walks them all: building the traces, steps and
    spans of a paper-scale resume spent ~6 s of its 35 s there (`benchmarks/scale.py` (a)), collecting
    nothing. Reference counting still frees everything as usual; the collector resumes after the block
    (when it was on before: a nested or concurrent block leaves it to the outermost one)."""
    was = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was:
            gc.enable()


def spread(items: Sequence[T], n: int) -> list[T]:
    """`n` of `items` evenly spaced over it (all of them when there are no more than `n`), in order:
    the sample a paper-scale estimate is made on (judge prompts, a shard's prompt tokens)."""
    if len(items) <= n:
        return list(items)
    step = len(items) / n
    return [items[int(i * step)] for i in range(n)]
