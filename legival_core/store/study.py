"""Every read and write of a human study (docs/study.md "Tables"): the design, written once; the
participants' answers, one per (participant, item), each committed on its own; their events.

The server's path (issue 42 part 2) is: `participant_by_token_hash` (a request's token -> its study,
code and admin flag), `next_item` (the item at the participant's position, which is the count of their
answers: a closed tab resumes there), `record_answer` (one transaction; a second answer to the same
item, or an answer to another item than the current one, is refused with `AnswerRefused`),
`add_event` (consent, open, ...). `progress` and `answers` serve the admin page and the analysis.
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
    """Who holds the token whose SHA-256 (hex) this is (`study.tokens.token_sha256`); None: nobody."""
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


# --- grading and analysis (issue 42 part 5, docs/study.md "Analysis") ---------------------------------


def answers_to_grade(store: Store, graders: pl.DataFrame, study: str | None = None) -> pl.DataFrame:
    """The answers (admin apart) with no grade by the current grader of their trace's dataset
    (`graders`: dataset, grader), with their problem: study, code, item_id, answer, dataset,
    problem_id, question, gold, choices, meta, grader; of the study `study` alone when given
    (`legival study grade --name`)."""
    import polars as pl

    if not store.has_table("study_grades"):
        return pl.DataFrame(schema={"study": pl.Utf8, "code": pl.Utf8, "item_id": pl.Utf8})
    with store._bound("_graders", graders.to_arrow()):
        return store._query(
            """
            SELECT s.study, s.code, s.item_id, s.answer, t.dataset, t.problem_id, p.question, p.gold,
                   p.choices, p.meta, cg.grader
            FROM study_answers s
            JOIN study_items i ON i.study = s.study AND i.item_id = s.item_id
            JOIN traces t ON t.trace_id = i.trace_id
            JOIN problems p ON p.dataset = t.dataset AND p.problem_id = t.problem_id
            JOIN _graders cg ON cg.dataset = t.dataset
            WHERE NOT EXISTS (SELECT 1 FROM study_grades g WHERE g.study = s.study AND g.code = s.code
                              AND g.item_id = s.item_id AND g.grader_version = cg.grader)
              AND (? IS NULL OR s.study = ?)
            ORDER BY s.study, s.code, s.item_id
            """, [study, study])


def replace_study_grades(store: Store, rows: Sequence[dict[str, Any]]) -> int:
    """Store the grades of a chunk of answers in ONE transaction, replacing an older grade of the same
    answer (a grader version bump); rows: study, code, item_id, correct, extracted, grade_status,
    grader_version, read_as."""
    import polars as pl

    if not rows:
        return 0
    keys = pl.DataFrame({c: [r[c] for r in rows] for c in ("study", "code", "item_id")},
                        schema={"study": pl.Utf8, "code": pl.Utf8, "item_id": pl.Utf8})
    with store.transaction(), store._bound("_keys", keys.to_arrow()):
        store._run("DELETE FROM study_grades g USING _keys k "
                   "WHERE g.study = k.study AND g.code = k.code AND g.item_id = k.item_id")
        store.insert_rows("study_grades", rows)
    return len(rows)


_HUMAN_ANSWERS = """
    WITH a AS (
        SELECT s.study, s.code, s.item_id, i.trace_id, i.k, i.m AS item_m, i.kind, s.rating,
               t.teacher, t.dataset, t.problem_id, g.correct, g.grade_status
        FROM study_answers s
        JOIN study_items i ON i.study = s.study AND i.item_id = s.item_id
        JOIN study_participants p ON p.study = s.study AND p.code = s.code AND NOT p.admin
        JOIN traces t ON t.trace_id = i.trace_id
        LEFT JOIN _graders cg ON cg.dataset = t.dataset
        LEFT JOIN study_grades g ON g.study = s.study AND g.code = s.code AND g.item_id = s.item_id
                                 AND g.grader_version = cg.grader),
    f AS (SELECT study, code, count(*) FILTER (WHERE kind = 'attention' AND NOT correct) AS attention_failed
          FROM a GROUP BY study, code)
    SELECT a.*, f.attention_failed::BIGINT AS attention_failed, f.attention_failed > ? AS excluded
    FROM a JOIN f USING (study, code)
"""
"""Every answer of every study with its item, trace and current grade (null: not graded by the current
grader); `excluded`: its participant failed more than `max_failures` graded attention checks."""


def human_answers(store: Store, graders: pl.DataFrame, max_failures: int) -> pl.DataFrame:
    """One row per stored answer of every study (admin apart): study, code, item_id, trace_id, k,
    item_m, kind, rating, teacher, dataset, problem_id, correct and grade_status (null when the
    current grader has not graded it: `legival study grade`), attention_failed (the participant's
    graded attention checks answered wrong) and excluded (more than `max_failures` of them)."""
    import polars as pl

    if not store.has_table("study_grades"):
        return pl.DataFrame(schema={"study": pl.Utf8, "code": pl.Utf8, "item_id": pl.Utf8})
    with store._bound("_graders", graders.to_arrow()):
        return store._query(_HUMAN_ANSWERS + " ORDER BY a.study, a.code, a.item_id", [max_failures])


def human_depths(store: Store, traces: pl.DataFrame, graders: pl.DataFrame, max_failures: int) -> pl.DataFrame:
    """The human student's depth rows (`transfer.utility`'s input, less `six`): one row per (tix, k)
    of the traces in `traces` (trace_id, tix, m) with graded answers to a study item (attention
    checks and excluded participants left out, pooled over studies and participants): y = mean
    correctness, n_rollouts = answers, n_rollout_unparsed = answers graded unparsed, no overflow
    and no forcing. An item whose stored m is not the trace's m now (another segmentation) is left out."""
    import polars as pl

    schema = {"tix": pl.Int64, "k": pl.Int64, "m": pl.Int64, "y": pl.Float64, "n_rollouts": pl.Int64,
              "n_overflow": pl.Int64, "n_forced": pl.Int64, "n_rollout_unparsed": pl.Int64}
    if not store.has_table("study_grades") or traces.height == 0:
        return pl.DataFrame(schema=schema)
    with store._bound("_graders", graders.to_arrow()), \
            store._bound("_tix", traces.select("trace_id", "tix", "m").to_arrow()):
        out = store._query(
            f"""
            WITH h AS ({_HUMAN_ANSWERS})
            SELECT x.tix::BIGINT AS tix, h.k::BIGINT AS k, x.m::BIGINT AS m,
                   avg(CASE WHEN h.correct THEN 1.0 ELSE 0.0 END) AS y,
                   count(*)::BIGINT AS n_rollouts, 0::BIGINT AS n_overflow, 0::BIGINT AS n_forced,
                   count(*) FILTER (WHERE h.grade_status = 'unparsed')::BIGINT AS n_rollout_unparsed
            FROM h JOIN _tix x ON x.trace_id = h.trace_id AND x.m = h.item_m
            WHERE h.kind = 'item' AND NOT h.excluded AND h.correct IS NOT NULL
            GROUP BY x.tix, h.k, x.m ORDER BY x.tix, h.k
            """, [max_failures])
    return out.cast(schema)  # type: ignore[arg-type]


def study_grade_cells(store: Store, graders: pl.DataFrame, max_failures: int | None = None) -> pl.DataFrame:
    """Per (teacher, dataset) of the studies' items (attention checks apart): items, answers (stored),
    used (the answers of participants not excluded: at most `max_failures` graded attention checks
    wrong; None: every participant) and graded (of those used, by the current grader): the coverage
    rows of the human student, counting what human_study.csv uses."""
    import polars as pl

    schema = {"teacher": pl.Utf8, "dataset": pl.Utf8, "items": pl.Int64, "answers": pl.Int64, "used": pl.Int64,
              "graded": pl.Int64}
    if not store.has_table("study_grades"):
        return pl.DataFrame(schema=schema)
    limit = max_failures if max_failures is not None else 2**62
    with store._bound("_graders", graders.to_arrow()):
        out = store._query(
            """
            WITH graded AS (
                SELECT s.study, s.code, s.item_id, i.kind, g.correct
                FROM study_answers s
                JOIN study_items i ON i.study = s.study AND i.item_id = s.item_id
                JOIN traces t ON t.trace_id = i.trace_id
                LEFT JOIN _graders cg ON cg.dataset = t.dataset
                LEFT JOIN study_grades g ON g.study = s.study AND g.code = s.code AND g.item_id = s.item_id
                                         AND g.grader_version = cg.grader),
            f AS (SELECT study, code, count(*) FILTER (WHERE kind = 'attention' AND NOT correct) AS failed
                  FROM graded GROUP BY study, code)
            SELECT t.teacher, t.dataset, count(DISTINCT i.study || chr(0) || i.item_id)::BIGINT AS items,
                   count(a.item_id)::BIGINT AS answers,
                   count(a.item_id) FILTER (WHERE f.failed <= ?)::BIGINT AS used,
                   count(a.correct) FILTER (WHERE f.failed <= ?)::BIGINT AS graded
            FROM study_items i JOIN traces t ON t.trace_id = i.trace_id
            LEFT JOIN graded a ON a.study = i.study AND a.item_id = i.item_id
            LEFT JOIN f ON f.study = a.study AND f.code = a.code
            WHERE i.kind = 'item'
            GROUP BY t.teacher, t.dataset ORDER BY t.teacher, t.dataset
            """, [limit, limit])
    return out.cast(schema)  # type: ignore[arg-type]


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


# --- Label Studio interop (issue 42 part 4, docs/study.md "Label Studio") ------------------------------


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


def item_kinds(store: Store, study: str) -> dict[str, str]:
    """item_id -> kind ('item' / 'attention') of every item of the study."""
    return dict(store._run("SELECT item_id, kind FROM study_items WHERE study = ? ORDER BY item_id", [study]))


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
