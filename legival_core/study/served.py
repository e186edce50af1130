"""A study as its server holds it: read from the store once, at start; what participants do goes to the
store's journal (docs/architecture.md "The journal", docs/study.md "The store while a study runs").

The server never holds the store: DuckDB allows one process per file, and a study runs for days while
`legival report`, `serve`, `study grade` and runs use the same store. `ServedStudy.load` reads everything
a page needs (participants by token hash, each one's assignment, every item's question and prefix cut as
the model students get it, the answers and events so far: the store's and the journal's) and the store is
closed again. Then an answer is committed to the journal (`store.journal.Journal.append`, on disk when
it returns) before the server acknowledges it, and kept here, where the next page reads it. The
first writable open of the store absorbs the journal (each answer stored once).

One server per study (`hold`: a lock file in the journal folder): two would each keep their own
answers and could accept two answers to one item.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any

from legival_core.outputs import sidecar
from legival_core.segment import SEGMENTER_VERSION
from legival_core.store import study as reads
from legival_core.store.journal import Journal
from legival_core.transfer.rollout_plan import prefix_for
from legival_core.types import Span, Steps

if TYPE_CHECKING:
    import polars as pl

    from legival_core.store.db import Store

ANSWER_COLUMNS = ("code", "item_id", "trace_id", "k", "m", "kind", "answer", "rating", "started_at", "submitted_at",
                  "seconds")
"""The admin page's and CSV export's answer columns (`store.study.answers`' columns)."""


class UnknownStudy(ValueError):
    """No study of that name in the store."""


class StudyServed(RuntimeError):
    """Another server serves this study of this store already."""


@dataclass(frozen=True, slots=True)
class Item:
    trace_id: str
    k: int
    m: int
    kind: str
    question: str
    prefix: str


@dataclass
class ServedStudy:
    """The study `name` of the store at `db`, as its server keeps it (module docstring). Thread-safe."""

    db: Path
    name: str
    consent_text: str
    participants: dict[str, reads.Participant]
    """token SHA-256 -> participant (the admin's too)."""
    plan: dict[str, list[str]]
    """code -> item ids in the order of their positions."""
    items: dict[str, Item]
    answers: dict[tuple[str, str], dict[str, Any]]
    """(code, item_id) -> the answer row (store.study_answers' columns)."""
    events: set[tuple[str, str, str | None]]
    """(code, event, detail) of every event so far."""
    journal: Journal
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False)
    _hold: int | None = field(default=None, repr=False)

    @classmethod
    def load(cls, store: Store, name: str, segmenter: str = SEGMENTER_VERSION) -> ServedStudy:
        """Read the study from an open store (read-only: the journal shows through it); the store may be
        closed as soon as this returns. `UnknownStudy`; `LookupError` for an item whose trace or steps
        are missing."""
        row = reads.study_row(store, name)
        if row is None:
            raise UnknownStudy(name)
        profile = row["config"].get("profile", "spec")
        hashes = reads.token_hashes(store, name)
        people = {hashes[p.code]: p for p in reads.participants(store, name) if p.code in hashes}
        plan: dict[str, list[str]] = {}
        items: dict[str, Item] = {}
        for a in reads.assignments(store, name).iter_rows(named=True):
            plan.setdefault(a["code"], []).append(a["item_id"])
            if a["item_id"] not in items:
                items[a["item_id"]] = _item(store, name, a, segmenter, profile)
        answers = {(r["code"], r["item_id"]): r for r in reads.answer_rows(store, name)}
        events = {(c, e, d) for c, e, d in reads.events(store, name)}
        return cls(Path(store.path), name, row["consent_text"], people, plan, items, answers, events,
                   Journal(store.path))

    # --- what a request reads -------------------------------------------------------------------------

    def participant(self, token_sha256: str) -> reads.Participant | None:
        return self.participants.get(token_sha256)

    def total(self, code: str) -> int:
        return len(self.plan.get(code, ()))

    def has_event(self, code: str, event: str, detail: str | None = None) -> bool:
        with self._lock:
            if detail is not None:
                return (code, event, detail) in self.events
            return any(c == code and e == event for c, e, _d in self.events)

    def next_item(self, code: str) -> reads.NextItem | None:
        """The participant's first position whose item has no answer (`store.study.next_item`'s rule)."""
        with self._lock:
            return self._next(code)

    def _next(self, code: str) -> reads.NextItem | None:
        mine = self.plan.get(code, [])
        for position, item_id in enumerate(mine):
            if (code, item_id) not in self.answers:
                it = self.items[item_id]
                return reads.NextItem(position, len(mine), item_id, it.trace_id, it.k, it.m, it.kind)
        return None

    def question_and_prefix(self, item_id: str) -> tuple[str, str]:
        it = self.items[item_id]
        return it.question, it.prefix

    # --- what a request writes ------------------------------------------------------------------------

    def record_answer(self, code: str, position: int, answer: str, rating: int | None, started_at: datetime | None,
                      seconds: float | None, submitted_at: datetime) -> str | None:
        """Commit the answer to the item at `position` (durable when this returns); None when stored, else
        why not: "done" (answered already) or "ahead" (not reached yet)."""
        with self._lock:
            current = self._next(code)
            if current is None or current.position != position:
                done = current.position if current is not None else self.total(code)
                return "done" if position < done else "ahead"
            row = {"study": self.name, "code": code, "item_id": current.item_id, "answer": answer, "rating": rating,
                   "started_at": started_at, "submitted_at": submitted_at, "seconds": seconds}
            self.journal.append("study_answers", [row])
            self.answers[(code, current.item_id)] = row
            return None

    def add_event(self, code: str, event: str, detail: str | None, at: datetime, once: bool = True) -> None:
        """Commit one event ('consent', 'open'); `once`: not when the participant has it already (with
        this detail)."""
        with self._lock:
            if once and ((code, event, detail) in self.events
                         or (detail is None and any(c == code and e == event for c, e, _d in self.events))):
                return
            self.journal.append("study_events", [{"study": self.name, "code": code, "occurred_at": at,
                                                  "event": event, "detail": detail}])
            self.events.add((code, event, detail))

    # --- the admin's view -------------------------------------------------------------------------------

    def progress(self) -> list[dict[str, Any]]:
        """Per participant (the admin apart): code, answered, total."""
        with self._lock:
            return [{"code": c, "answered": sum(1 for i in ids if (c, i) in self.answers), "total": len(ids)}
                    for c, ids in sorted(self.plan.items())]

    def item_progress(self) -> list[dict[str, Any]]:
        """Per item: item_id, kind, k, m, assigned, answered."""
        with self._lock:
            return [{"item_id": i, "kind": it.kind, "k": it.k, "m": it.m,
                     "assigned": sum(1 for ids in self.plan.values() if i in ids),
                     "answered": sum(1 for (_c, j) in self.answers if j == i)}
                    for i, it in sorted(self.items.items())]

    def answer_frame(self) -> pl.DataFrame:
        """Every answer with its item (`ANSWER_COLUMNS`), by code and time."""
        import polars as pl

        with self._lock:
            rows = [{**{k: r[k] for k in ("code", "item_id", "answer", "rating", "started_at", "submitted_at",
                                          "seconds")},
                     "trace_id": self.items[r["item_id"]].trace_id, "k": self.items[r["item_id"]].k,
                     "m": self.items[r["item_id"]].m, "kind": self.items[r["item_id"]].kind}
                    for r in self.answers.values() if r["item_id"] in self.items]
        schema: dict[str, Any] = {"code": pl.Utf8, "item_id": pl.Utf8, "trace_id": pl.Utf8, "k": pl.Int64, "m": pl.Int64,
                  "kind": pl.Utf8, "answer": pl.Utf8, "rating": pl.Int64, "started_at": pl.Datetime("us"),
                  "submitted_at": pl.Datetime("us"), "seconds": pl.Float64}
        return pl.DataFrame(rows, schema=schema).select(ANSWER_COLUMNS).sort("code", "submitted_at")

    # --- one server per study -------------------------------------------------------------------------

    def hold(self) -> None:
        """Take this study's server lock (`StudyServed` when another server has it); released by `close`
        or, however the process ends, by the kernel."""
        import fcntl
        import os

        path = sidecar(self.db, "journal") / f"serving-{self.name}.lock"
        fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o600)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(fd)
            raise StudyServed(f"another `legival study serve` serves study {self.name} of {self.db} already "
                              "(one server per study: its answers are kept by that server)") from None
        self._hold = fd

    def close(self) -> None:
        import os

        if self._hold is not None:
            os.close(self._hold)
            self._hold = None
        self.journal.close()


def _item(store: Store, name: str, a: dict[str, Any], segmenter: str, profile: Any) -> Item:
    t = reads.item_text(store, name, a["item_id"], segmenter)
    if t is None or len(t.spans) != t.m:
        raise LookupError(f"item {a['item_id']}: its trace or steps are missing from the store")
    steps = Steps(t.reasoning, tuple(Span(x, y) for x, y in t.spans))
    return Item(a["trace_id"], int(a["k"]), int(a["m"]), a["kind"], t.question, prefix_for(steps, t.k, profile))
