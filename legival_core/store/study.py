"""The reads and writes of a human study's design and answers (docs/study.md "Tables"): the design,
written once; the participants' answers, one per (participant, item); their events.

The study server reads a study once, at start (`study.served.ServedStudy.load`: `study_row`,
`participants`, `token_hashes`, `assignments`, `item_text`, `answer_rows`, `events`), then commits to the
store's journal (`store/journal.py`), never to the store. `next_item`, `record_answer` (one transaction;
a second answer to the same item, or an answer to another item than the current one, is refused with
`AnswerRefused`) and `add_event` write the store directly, for a command that holds it. Grading and the
report's reads are in `study_grades.py`, another tool's answers in `study_import.py`.
"""
from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

from legival_core.store.db import Store

if TYPE_CHECKING:
    import polars as pl


class StudyExists(ValueError):
    """A study of that name is stored already (nothing was written)."""


class AnswerRefused(ValueError):
    """An answer that is not stored: already answered, not the participant's current item, or unknown."""


@dataclass(frozen=True, slots=True)
class Participant:
    study: str
    code: str
    admin: bool


@dataclass(frozen=True, slots=True)
class NextItem:
    position: int
    total: int
    item_id: str
    trace_id: str
    k: int
    m: int
    kind: str


def _now() -> datetime:
    return datetime.now(UTC).replace(tzinfo=None)


def study_names(store: Store) -> list[str]:
    if not store.has_table("studies"):
        return []
    return [r[0] for r in store._run("SELECT name FROM studies ORDER BY name")]


def write_design(store: Store, study: dict[str, Any], items: Sequence[dict[str, Any]],
                 participants: Sequence[dict[str, Any]], assignments: Sequence[dict[str, Any]]) -> None:
    """The whole design in ONE transaction: `study` (name, seed, design_version, config (a dict),
    consent_text), its items, participants and assignments (rows of the tables' columns less `study`).
    A stored name is refused (`StudyExists`), leaving the store as it was."""
    name = study["name"]
    with store.transaction():
        if store._run("SELECT count(*) FROM studies WHERE name = ?", [name])[0][0]:
            raise StudyExists(f"study {name!r} exists in {store.path}: choose another --name")
        store._run("INSERT INTO studies (name, created, seed, design_version, config, consent_text) "
                   "VALUES (?, ?, ?, ?, ?, ?)",
                   [name, _now(), study["seed"], study["design_version"],
                    json.dumps(study["config"], sort_keys=True), study["consent_text"]])
        for table, rows in (("study_items", items), ("study_participants", participants),
                            ("study_assignments", assignments)):
            store.insert_rows(table, [{"study": name, **r} for r in rows])


def studies(store: Store) -> pl.DataFrame:
    """One row per study: name, created, seed, design_version, items, attention_items, participants
    (the admin apart), answers."""
    import polars as pl

    if not store.has_table("studies"):
        return pl.DataFrame(schema={"name": pl.Utf8})
    return store._query(
        """
        SELECT s.name, s.created, s.seed, s.design_version,
               (SELECT count(*) FROM study_items i WHERE i.study = s.name AND i.kind = 'item') AS items,
               (SELECT count(*) FROM study_items i WHERE i.study = s.name AND i.kind = 'attention') AS attention_items,
               (SELECT count(*) FROM study_participants p WHERE p.study = s.name AND NOT p.admin) AS participants,
               (SELECT count(*) FROM study_assignments a WHERE a.study = s.name) AS answers_needed,
               (SELECT count(*) FROM study_answers a WHERE a.study = s.name) AS answers
        FROM studies s ORDER BY s.name
        """)


def study_row(store: Store, name: str) -> dict[str, Any] | None:
    """The study's stored row (config parsed), None when there is none."""
    if not store.has_table("studies"):
        return None
    rows = store._query("SELECT * FROM studies WHERE name = ?", [name]).to_dicts()
    if not rows:
        return None
    return {**rows[0], "config": json.loads(rows[0]["config"])}


def participants(store: Store, name: str) -> list[Participant]:
    return [Participant(name, c, bool(a)) for c, a in store._run(
        "SELECT code, admin FROM study_participants WHERE study = ? ORDER BY admin, code", [name])]


def token_hashes(store: Store, name: str) -> dict[str, str]:
    """code -> the SHA-256 of its token, to check that a key file derives them (`tokens.check_key`)."""
    return dict(store._run("SELECT code, token_sha256 FROM study_participants WHERE study = ?", [name]))


def participant_by_token_hash(store: Store, token_sha256: str) -> Participant | None:
    """Who holds the token whose SHA-256 (hex) this is (`study.links.token_sha256`); None: nobody."""
    rows = store._run("SELECT study, code, admin FROM study_participants WHERE token_sha256 = ?", [token_sha256])
    return Participant(rows[0][0], rows[0][1], bool(rows[0][2])) if rows else None


def next_item(store: Store, study: str, code: str) -> NextItem | None:
    """The participant's current item: their first assigned position whose item they have not answered
    (answers come in order through the server, so it is the count of their answers; an import from
    Label Studio may fill positions out of order, and those are skipped); None when they are done."""
    rows = store._run(
        """
        WITH t AS (SELECT count(*) AS total FROM study_assignments WHERE study = $1 AND code = $2)
        SELECT a.position, t.total, a.item_id, i.trace_id, i.k, i.m, i.kind
        FROM study_assignments a CROSS JOIN t
        JOIN study_items i ON i.study = a.study AND i.item_id = a.item_id
        WHERE a.study = $1 AND a.code = $2 AND NOT EXISTS (
            SELECT 1 FROM study_answers s WHERE s.study = a.study AND s.code = a.code AND s.item_id = a.item_id)
        ORDER BY a.position LIMIT 1
        """, [study, code])
    return NextItem(*rows[0]) if rows else None


def record_answer(store: Store, study: str, code: str, item_id: str, answer: str, rating: int | None,
                  started_at: datetime | None, seconds: float | None, submitted_at: datetime | None = None) -> None:
    """Store one answer in its own transaction (committed when this returns). Refused (`AnswerRefused`,
    nothing stored) when `item_id` is not the participant's current item (answered already, or ahead)."""
    import duckdb

    with store.transaction():
        current = next_item(store, study, code)
        if current is None or current.item_id != item_id:
            done = store._run("SELECT count(*) FROM study_answers WHERE study = ? AND code = ? AND item_id = ?",
                              [study, code, item_id])[0][0]
            raise AnswerRefused(f"item {item_id} is answered already: one answer per item" if done else
                                f"item {item_id} is not participant {code}'s current item"
                                + (" (they are done)" if current is None else f" ({current.item_id} is)"))
        try:
            store._run("INSERT INTO study_answers (study, code, item_id, answer, rating, started_at, submitted_at, "
                       "seconds) VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
                       [study, code, item_id, answer, rating, started_at, submitted_at or _now(), seconds])
        except duckdb.ConstraintException as e:
            raise AnswerRefused(f"item {item_id} is answered already: one answer per item") from e


def add_event(store: Store, study: str, code: str, event: str, detail: str | None = None,
              at: datetime | None = None) -> None:
    """One event of a participant ('consent', 'open', ...), committed at once; a repeat at the same
    instant is kept once."""
    with store.transaction():
        store._run("INSERT OR IGNORE INTO study_events (study, code, occurred_at, event, detail) VALUES (?, ?, ?, ?, ?)",
                   [study, code, at or _now(), event, detail])


def progress(store: Store, study: str) -> pl.DataFrame:
    """Per participant (the admin apart): code, answered, total."""
    return store._query(
        """
        SELECT p.code, (SELECT count(*) FROM study_answers a WHERE a.study = p.study AND a.code = p.code) AS answered,
               (SELECT count(*) FROM study_assignments a WHERE a.study = p.study AND a.code = p.code) AS total
        FROM study_participants p WHERE p.study = ? AND NOT p.admin ORDER BY p.code
        """, [study])


def assignments(store: Store, study: str) -> pl.DataFrame:
    """code, position, item_id, trace_id, k, m, fraction, kind, by (code, position)."""
    return store._query(
        """
        SELECT a.code, a.position, a.item_id, i.trace_id, i.k, i.m, i.fraction, i.kind
        FROM study_assignments a JOIN study_items i ON i.study = a.study AND i.item_id = a.item_id
        WHERE a.study = ? ORDER BY a.code, a.position
        """, [study])


def answers(store: Store, study: str) -> pl.DataFrame:
    """Every stored answer of the study with its item: code, item_id, trace_id, k, m, kind, answer, rating,
    started_at, submitted_at, seconds."""
    return store._query(
        """
        SELECT s.code, s.item_id, i.trace_id, i.k, i.m, i.kind, s.answer, s.rating, s.started_at,
               s.submitted_at, s.seconds
        FROM study_answers s JOIN study_items i ON i.study = s.study AND i.item_id = s.item_id
        WHERE s.study = ? ORDER BY s.code, s.submitted_at
        """, [study])


def has_event(store: Store, study: str, code: str, event: str, detail: str | None = None) -> bool:
    """Whether the participant has an event of this kind (the server: was consent given?), with this
    detail when given (was this item opened already?)."""
    where = "study = ? AND code = ? AND event = ?" + (" AND detail = ?" if detail is not None else "")
    args = [study, code, event] + ([detail] if detail is not None else [])
    return bool(store._run(f"SELECT count(*) FROM study_events WHERE {where}", args)[0][0])


@dataclass(frozen=True, slots=True)
class ItemText:
    """What the server needs to show an item: the question, the trace's text and its step spans (to
    cut the prefix of k steps), never the gold (not read)."""

    question: str
    reasoning: str
    spans: tuple[tuple[int, int], ...]
    k: int
    m: int


def item_text(store: Store, study: str, item_id: str, segmenter: str) -> ItemText | None:
    """The item's question, trace text and steps (of `segmenter`); None when the study has no such item."""
    rows = store._run(
        """
        SELECT p.question, t.reasoning, i.k, i.m
        FROM study_items i JOIN traces t ON t.trace_id = i.trace_id
        JOIN problems p ON p.dataset = t.dataset AND p.problem_id = t.problem_id
        WHERE i.study = ? AND i.item_id = ?
        """, [study, item_id])
    if not rows:
        return None
    spans = store._run("SELECT s.start_char, s.end_char FROM steps s JOIN study_items i ON s.trace_id = i.trace_id "
                       "WHERE i.study = ? AND i.item_id = ? AND s.segmenter = ? ORDER BY s.idx",
                       [study, item_id, segmenter])
    question, reasoning, k, m = rows[0]
    return ItemText(question, reasoning, tuple((int(a), int(b)) for a, b in spans), int(k), int(m))


def item_progress(store: Store, study: str) -> pl.DataFrame:
    """Per item: item_id, kind, k, m, assigned (participants given it), answered."""
    return store._query(
        """
        SELECT i.item_id, i.kind, i.k, i.m,
               (SELECT count(*) FROM study_assignments a WHERE a.study = i.study AND a.item_id = i.item_id) AS assigned,
               (SELECT count(*) FROM study_answers a WHERE a.study = i.study AND a.item_id = i.item_id) AS answered
        FROM study_items i WHERE i.study = ? ORDER BY i.item_id
        """, [study])


def has_studies_at(path: str) -> bool:
    """Whether the store file at `path` holds a study (a run's `study` stage has a job then). A missing
    file: False; one that cannot be opened read-only now (held by a writer): True (the stage then
    plans, on the run's own connection, and finds whatever is there)."""
    from pathlib import Path

    from legival_core.store.db import StoreError

    if not Path(path).is_file():
        return False
    try:
        with Store(path, read_only=True) as store:
            return bool(study_names(store))
    except StoreError:
        return True


def item_kinds(store: Store, study: str) -> dict[str, str]:
    """item_id -> kind ('item' / 'attention') of every item of the study."""
    return dict(store._run("SELECT item_id, kind FROM study_items WHERE study = ? ORDER BY item_id", [study]))


def answer_rows(store: Store, study: str) -> list[dict[str, Any]]:
    """Every stored answer of the study as its row (study_answers' columns)."""
    return store._query("SELECT * FROM study_answers WHERE study = ? ORDER BY code, item_id", [study]).to_dicts()


def events(store: Store, study: str) -> list[tuple[str, str, str | None]]:
    """(code, event, detail) of every event of the study's participants."""
    return [(c, e, d) for c, e, d in store._run(
        "SELECT code, event, detail FROM study_events WHERE study = ? ORDER BY occurred_at", [study])]
