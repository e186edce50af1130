"""Answers from another tool's export (Label Studio: docs/study.md "Label Studio") stored under the study
server's rules, all or nothing in one transaction."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from legival_core.store.db import Store
from legival_core.store.study import _now, item_kinds


class ImportRefused(ValueError):
    """Answers from an import that are not stored (nothing of the file is): a conflict with a stored
    answer, or an item that is not the participant's."""


@dataclass(frozen=True, slots=True)
class ImportedAnswer:
    """One answer read from another tool's export; `source` names where it came from (task, line,
    annotation) for a refusal's message."""

    code: str
    item_id: str
    answer: str
    rating: int | None
    started_at: datetime | None
    submitted_at: datetime | None
    seconds: float | None
    source: str


@dataclass(frozen=True, slots=True)
class ImportCounts:
    stored: int
    already: int
    """Answers equal to one stored before (or earlier in the same import): not stored again."""
    outside_assignment: int
    """Stored answers to an item that is not in the participant's assignment (`any_item` only)."""


def import_answers(store: Store, study: str, rows: Sequence[ImportedAnswer], any_item: bool = False) -> ImportCounts:
    """Store imported answers all or nothing, in ONE transaction, under the server's rules: one answer
    per (participant, item) and, unless `any_item`, only an item of the participant's assignment (a
    tool without per-annotator assignment cannot keep a participant off other items). An answer equal
    (text and rating) to the stored one is not stored again (a re-import stores nothing); a different
    one is a conflict (`ImportRefused`, nothing stored). The order a participant answered in is not
    checked: another tool may show their items in any order (the server then shows a participant
    their first position still unanswered: `next_item`)."""
    stored = 0
    with store.transaction():
        items = set(item_kinds(store, study))
        assigned = {(c, i) for c, i in store._run(
            "SELECT code, item_id FROM study_assignments WHERE study = ?", [study])}
        codes = {c for c, admin in store._run("SELECT code, admin FROM study_participants WHERE study = ?", [study])
                 if not admin}
        have: dict[tuple[str, str], tuple[tuple[str, int | None], str]] = {
            (c, i): ((a, r), "the stored answer") for c, i, a, r in store._run(
                "SELECT code, item_id, answer, rating FROM study_answers WHERE study = ?", [study])}
        new: list[list[Any]] = []
        already = outside = 0
        for r in rows:
            if r.code not in codes:
                raise ImportRefused(f"{r.source}: {r.code!r} is not a participant of study {study}")
            if r.item_id not in items:
                raise ImportRefused(f"{r.source}: {r.item_id!r} is not an item of study {study}")
            key = (r.code, r.item_id)
            if key not in assigned and not any_item:
                raise ImportRefused(
                    f"{r.source}: participant {r.code} answered an item that is not in their assignment (they may "
                    "have seen its problem in another item); --any-item stores such answers, counted in the summary")
            if key in have:
                value, where = have[key]
                if value != (r.answer, r.rating):
                    raise ImportRefused(
                        f"{r.source}: CONFLICT: participant {r.code} already has a different answer to this item "
                        f"({where}): one answer per (participant, item); nothing from this file was stored")
                already += 1
                continue
            have[key] = ((r.answer, r.rating), r.source)
            outside += key not in assigned
            new.append([study, r.code, r.item_id, r.answer, r.rating, r.started_at, r.submitted_at or _now(),
                        r.seconds])
        for row in new:
            store._run("INSERT INTO study_answers (study, code, item_id, answer, rating, started_at, submitted_at, "
                       "seconds) VALUES (?, ?, ?, ?, ?, ?, ?, ?)", row)
            stored += 1
    return ImportCounts(stored, already, outside)
