"""Label Studio interop (docs/study.md "Label Studio"): a study's items as Label Studio tasks and a
labeling config, and Label Studio's JSON export read back into the study's answers.

Why these choices:
- **One task per item**, not per (participant, position): the open-source Label Studio has no
  per-annotator assignment (any annotator may open any task of a project), so a task per assignment
  would not keep a participant on their own items either, and would copy every text once per
  participant. The design's order and its "never the same problem twice" travel beside the tasks: in
  `assignments.csv` (code, position, item_key) and as one task file per participant
  (`participants/<code>.json`, their items in order): a project per participant with Label Studio's
  default sequential sampling shows each one exactly their items in the design's order. The import
  refuses an answer to an item outside the participant's assignment unless told otherwise.
- **Blind tasks**: `data` holds `item_key`, the problem and the prefix, cut exactly as the server cuts
  it (`store.study.item_text` + `transfer.rollout_plan.prefix_for` under the study's profile), never the
  gold, the later steps, the teacher or an id. `item_key` is HMAC(study key, item id): it says nothing
  of the item (an attention check's id starts with `A`), and only the key file maps it back. Tasks are
  listed in key order, which is no order of the design.
- **The import is all or nothing** (`store.study_import.import_answers`, one transaction) and idempotent; an
  export is read whole only under `MAX_IMPORT_BYTES` (Label Studio writes one JSON array, and a study's
  export is megabytes), its tasks decoded one by one so an error names the task's line.
"""

from __future__ import annotations

import csv
import errno
import hashlib
import hmac
import json
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any
from xml.sax.saxutils import quoteattr

from legival_core import untrusted_json
from legival_core.segment import SEGMENTER_VERSION
from legival_core.store import study as reads
from legival_core.store import study_import
from legival_core.store.db import Store
from legival_core.study.answers import AnswerRefused, checked_answer, kind_of
from legival_core.transfer.rollout_plan import prefix_for
from legival_core.types import Span, Steps

FORMAT = "label-studio"
MAX_IMPORT_BYTES = 256 * 1024 * 1024
"""A larger file is refused before it is read (a 20-participant study exports well under 10 MB)."""

MAX_LEAD_SECONDS = 10 * 24 * 3600
"""An annotation's `lead_time` (seconds on the task) is read when finite and from 0 to 10 days: Label
Studio counts the time a task stays open, so a day is possible (a tab left open overnight), ten are not
a time on item; NaN, Infinity or 1e300 are a damaged file, refused naming the field."""
TIME_RANGE = (datetime(1970, 1, 1), datetime(2200, 1, 1))
"""An annotation's `created_at` is read when inside this range (UTC): outside it, it is no time a
study ran, and its difference with `lead_time` could leave datetime's range."""

ANSWER, RATING = "answer", "rating"
"""The labeling config's control names: the import reads these results."""

README = """\
Label Studio files of the study {study} (legival study export --format label-studio)

config.xml        the labeling config: a project's Settings > Labeling Interface > Code
tasks.json        one task per item (data: item_key, problem, prefix); import it into the project
assignments.csv   the design: participant code, position, item_key (each participant's items in order)
participants/     one task file per participant, their items in the design's order

Label Studio (open source) cannot assign tasks to annotators: in one shared project any annotator may
open any task, and so see a problem twice. To keep the design, make one project per participant with
this config and import only participants/<code>.json (sequential sampling, the default, keeps the
order); or assign the tasks of assignments.csv to each annotator yourself (Label Studio Enterprise).

Annotators are matched to participant codes by their e-mail (P01@your.lab or just the code before the
@) or user id; otherwise give a CSV with columns annotator,code to --annotators.

Back: export each project as JSON (Export > JSON), then
  legival study import --db DB --name {study} EXPORT.json [--annotators map.csv]
Re-importing the same file stores nothing new; a changed answer is refused as a conflict.
"""


class LabelStudioError(ValueError):
    """A file we cannot use (its message names the file, the task and the field), or a study whose items
    cannot be cut (a trace or its steps missing)."""


@dataclass(frozen=True, slots=True)
class Export:
    tasks: list[dict[str, Any]]
    config_xml: str
    assignments: list[dict[str, Any]]
    """code, position, item_key."""


def item_key(key: bytes, study: str, item_id: str) -> str:
    """The item's opaque name in Label Studio: HMAC-SHA256(study key, label-studio NUL study NUL item)."""
    mac = hmac.new(key, "\x00".join(("label-studio", study, item_id)).encode(), hashlib.sha256).hexdigest()
    return f"k{mac[:20]}"


def label_config() -> str:
    """The labeling config: the problem and the prefix as plain text (Label Studio escapes `Text`), a
    required one-line final answer and an optional 1-5 rating, as on the study server's item page."""
    return f"""<View>
  <Header value="Problem"/>
  <Text name="problem" value="$problem"/>
  <Header value="The start of a solution (it may be empty)"/>
  <Text name="prefix" value="$prefix"/>
  <Header value="Your final answer"/>
  <TextArea name={quoteattr(ANSWER)} toName="problem" required="true" maxSubmissions="1" rows="2"
            placeholder="Type the final answer"/>
  <Header value="I could follow this reasoning (optional; 1 = not at all, 5 = completely)"/>
  <Rating name={quoteattr(RATING)} toName="prefix" maxRating="5"/>
</View>
"""


def export_tasks(store: Store, name: str, key: bytes, segmenter: str = SEGMENTER_VERSION) -> Export:
    """The study's tasks (one per item, in key order), the config and the keyed assignment."""
    row = reads.study_row(store, name)
    if row is None:
        raise LabelStudioError(f"no study {name!r} in {store.path}")
    profile = row["config"].get("profile", "spec")
    keys = {i: item_key(key, name, i) for i in reads.item_kinds(store, name)}
    if len(set(keys.values())) != len(keys):  # 80 bits: never seen, but a silent merge would be worse
        raise LabelStudioError(f"study {name}: two items got the same item_key")
    tasks = []
    for item_id, k in sorted(keys.items(), key=lambda kv: kv[1]):
        t = reads.item_text(store, name, item_id, segmenter)
        if t is None or len(t.spans) != t.m:
            raise LabelStudioError(f"study {name}: item {item_id}: its trace or steps are missing from the store")
        steps = Steps(t.reasoning, tuple(Span(a, b) for a, b in t.spans))
        tasks.append({"data": {"item_key": k, "problem": t.question, "prefix": prefix_for(steps, t.k, profile)}})
    plan = [{"code": r["code"], "position": r["position"], "item_key": keys[r["item_id"]]}
            for r in reads.assignments(store, name).to_dicts()]
    return Export(tasks, label_config(), plan)


WRITER = "legival study export"
"""Who wrote an export folder, in its manifest (`legival_core.outputs`): `--force` replaces only such a folder."""


def write_export(export: Export, study: str, out: Path, force: bool = False) -> list[Path]:
    """Write the files into `out` whole or not at all (`legival_core.outputs.replaced_whole`: a new folder
    beside it, swapped into place). A non-empty `out` is refused (`FileExistsError`) unless `force`, and
    even then it is replaced only when an earlier export wrote every file in it (its manifest lists
    them): a store, a key folder, an input or a note in `out` is refused by name, never deleted."""
    import polars as pl

    from legival_core.outputs import MANIFEST, foreign_entries, replaced_whole, write_manifest
    from legival_core.safe_csv import write_csv

    if out.exists() and not out.is_dir():
        raise FileExistsError(errno.ENOTDIR, "is a file, not a folder", str(out))
    if out.is_dir() and any(out.iterdir()) and not force:
        earlier = not foreign_entries(out, WRITER)
        raise FileExistsError(errno.EEXIST, "is not empty" + (" (an earlier export: --force replaces it)" if earlier
                                                               else " (choose a new or empty folder)"), str(out))
    with replaced_whole(out, WRITER) as tmp:
        (tmp / "config.xml").write_text(export.config_xml, encoding="utf-8")
        (tmp / "tasks.json").write_text(json.dumps(export.tasks, ensure_ascii=False, indent=1), encoding="utf-8")
        write_csv(pl.DataFrame(export.assignments, schema={"code": pl.Utf8, "position": pl.Int64, "item_key": pl.Utf8}),
                  tmp / "assignments.csv")
        (tmp / "README.txt").write_text(README.format(study=study), encoding="utf-8")
        (tmp / "participants").mkdir()
        by_key = {t["data"]["item_key"]: t for t in export.tasks}
        for code in sorted({r["code"] for r in export.assignments}):
            mine = sorted((r for r in export.assignments if r["code"] == code), key=lambda r: r["position"])
            (tmp / "participants" / f"{code}.json").write_text(
                json.dumps([by_key[r["item_key"]] for r in mine], ensure_ascii=False, indent=1), encoding="utf-8")
        tmp.chmod(0o755)
        write_manifest(tmp, [p.relative_to(tmp).as_posix() for p in tmp.rglob("*") if p.is_file()], WRITER)
    return sorted(p for p in out.rglob("*") if p.is_file() and p.name != MANIFEST)


# --- the import ---------------------------------------------------------------------------------------


def _tasks(path: Path, max_bytes: int) -> Iterator[tuple[int, int, Any]]:
    """(index, line, task) of each element of the file's top-level JSON array, decoded one by one so
    an error names its line."""
    size = path.stat().st_size
    if size > max_bytes:
        raise LabelStudioError(f"{path}: {size:,} bytes, over the {max_bytes:,}-byte limit of an import "
                               "(export fewer tasks per file)")
    raw = path.read_bytes()
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as e:
        line = raw.count(b"\n", 0, e.start) + 1
        raise LabelStudioError(f"{path}: line {line}: not UTF-8 text (byte {e.start})") from e
    seen_line, seen_pos = 1, 0

    def line_at(pos: int) -> int:
        nonlocal seen_line, seen_pos
        seen_line += text.count("\n", seen_pos, pos)
        seen_pos = pos
        return seen_line

    def skip(pos: int) -> int:
        while pos < len(text) and text[pos] in " \t\r\n\ufeff":
            pos += 1
        return pos

    def bad(pos: int, what: str) -> LabelStudioError:
        return LabelStudioError(f"{path}: line {line_at(pos)}: {what}")

    pos = skip(0)
    if not text.startswith("[", pos):
        raise bad(pos, "not a Label Studio JSON export (a JSON list of tasks; export with Export > JSON)")
    pos, index = skip(pos + 1), 0
    if text.startswith("]", pos):
        return
    while True:
        try:
            task, end = untrusted_json.decode_at(text, pos)
        except untrusted_json.MalformedJson as e:
            raise bad(e.pos, f"task {index}: bad JSON ({e.msg.removeprefix('malformed JSON: ')})") from None
        except untrusted_json.JsonRefused as e:  # JSON past a limit: depth, a number, a lone surrogate, a key twice
            tid = e.document.get("id") if isinstance(e.document, dict) else None
            shown = f", id {tid}" if isinstance(tid, int) and not isinstance(tid, bool) else ""
            raise LabelStudioError(f"{path}: task {index} (line {line_at(pos)}{shown}): {e.field or '<task>'}: "
                                   f"{e.msg}") from None
        yield index, line_at(pos), task
        pos, index = skip(end), index + 1
        if text.startswith("]", pos):
            if skip(pos + 1) != len(text):
                raise bad(skip(pos + 1), "text after the end of the list of tasks")
            return
        if not text.startswith(",", pos):
            raise bad(pos, f"bad JSON after task {index - 1} (expected ',' or ']')")
        pos = skip(pos + 1)


def _typed(value: Any, kind: type | tuple[type, ...], where: str, expected: str) -> Any:
    """`value` when it is of `kind` (a bool is no number), else an error naming the field and what it got:
    Label Studio writes every field with one type, and a value of another is a damaged or edited file,
    never read loosely ("false" is not false)."""
    if isinstance(value, kind) and not (isinstance(value, bool) and bool not in (kind if isinstance(kind, tuple)
                                                                                  else (kind,))):
        return value
    got = repr(value)[:40] if isinstance(value, str | int | float) else kind_of(value)
    raise LabelStudioError(f"{where}: expected {expected}, got {got}")


def _identities(completed_by: Any, where: str) -> list[str]:
    """The names an annotator may be known by: an e-mail, its part before the @, a user id. Label Studio
    writes `completed_by` as the user id (the quick JSON export) or as {id, email, ...} (a snapshot)."""
    who = _typed(completed_by, (int, dict), where, "a user (an id or {id, email})")
    if isinstance(who, int):
        return [str(who)]
    out = []
    if who.get("email") is not None:
        email = _typed(who["email"], str, f"{where}.email", "an e-mail (text)")
        out += [email, email.split("@", 1)[0]] if email else []
    if who.get("id") is not None:
        out.append(str(_typed(who["id"], int, f"{where}.id", "a user id (a whole number)")))
    if not out:
        raise LabelStudioError(f"{where}: a user without an id or e-mail")
    return out


def _when(value: Any, where: str) -> datetime | None:
    """`created_at` as a naive UTC time, checked to lie in `TIME_RANGE` (so no later arithmetic on it
    can leave datetime's range)."""
    if value is None:
        return None
    _typed(value, str, where, "an ISO 8601 time (text)")
    try:
        at = datetime.fromisoformat(value)
        at = at.astimezone(UTC).replace(tzinfo=None) if at.tzinfo is not None else at
    except (ValueError, OverflowError) as e:
        raise LabelStudioError(f"{where}: not an ISO 8601 time: {value[:40]!r}") from e
    low, high = TIME_RANGE
    if not low <= at < high:
        raise LabelStudioError(f"{where}: {value[:40]!r} is not a time from {low.year} to {high.year - 1} (UTC)")
    return at


def _lead_seconds(value: Any, where: str) -> float | None:
    """`lead_time` in seconds, finite and from 0 to `MAX_LEAD_SECONDS` (rounded to the millisecond)."""
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int | float) or not (0 <= value <= MAX_LEAD_SECONDS):
        shown = repr(value)[:40]  # NaN and infinities fail the range test too
        raise LabelStudioError(f"{where}: {shown} is not a number of seconds from 0 to {MAX_LEAD_SECONDS:,} (10 days)")
    return round(float(value), 3)


def _answer_and_rating(result: Any, where: str) -> tuple[str, int | None]:
    """The answer text and rating of an annotation's results, checked as the study server checks a form
    (`study.answers.checked_answer`: one validation whichever door an answer comes through)."""
    _typed(result, list, f"{where}.result", "a list of results")
    text: str | None = None
    rating: Any = None
    fields: dict[str, str] = {}  # answer/rating -> where it was read
    for j, r in enumerate(result):
        at = f"{where}.result[{j}]"
        _typed(r, dict, at, "a result (an object with a value)")
        name = _typed(r.get("from_name"), str, f"{at}.from_name", "a control name (text)")
        if name not in (ANSWER, RATING):
            continue
        if name in fields:
            raise LabelStudioError(f"{at}: a second {name!r} result (which one is meant?)")
        value = _typed(r.get("value"), dict, f"{at}.value", "an object")
        if name == ANSWER:
            fields[name] = f"{at}.value.text"
            lines = _typed(value.get("text"), list, fields[name], "a list of texts")
            text = "\n".join(_typed(x, str, f"{fields[name]}[{i}]", "text") for i, x in enumerate(lines))
        else:
            fields[name] = f"{at}.value.rating"
            rating = value.get("rating")
    if text is None:
        raise LabelStudioError(f"{where}.result: no {ANSWER!r} text (the labeling config's TextArea must be named "
                               f"{ANSWER!r}: use the exported config.xml)")
    try:
        return checked_answer(text, rating)
    except AnswerRefused as e:
        raise LabelStudioError(f"{fields[e.field]}: {e.what}") from None


@dataclass(frozen=True, slots=True)
class Read:
    answers: list[study_import.ImportedAnswer]
    tasks: int
    annotations: int
    cancelled: int


def read_export(path: Path, study: str, key: bytes, item_ids: list[str], codes: set[str],
                annotators: dict[str, str] | None = None, max_bytes: int = MAX_IMPORT_BYTES) -> Read:
    """Every submitted annotation of the export as an answer (cancelled/skipped ones counted, not
    read). An annotator is a participant through `annotators` (its e-mail or id -> code) when given,
    else when its e-mail, the e-mail's part before the @, or its id is a code. Every field is read with
    the type Label Studio writes it with (`_typed`)."""
    by_key = {item_key(key, study, i): i for i in item_ids}
    out: list[study_import.ImportedAnswer] = []
    n_tasks = n_ann = cancelled = 0
    for index, line, task in _tasks(path, max_bytes):
        n_tasks += 1
        tid = task.get("id") if isinstance(task, dict) else None
        here = f"{path}: task {index} (line {line}" + (f", id {tid})" if _is_int(tid) else ")")
        if not isinstance(task, dict) or not isinstance(task.get("data"), dict):
            raise LabelStudioError(f"{here}: data: missing (not a Label Studio task)")
        if tid is not None:
            _typed(tid, int, f"{here}: id", "a task id (a whole number)")
        k = task["data"].get("item_key")
        if not isinstance(k, str):
            raise LabelStudioError(f"{here}: data.item_key: missing (a task not from `legival study export`)")
        if k not in by_key:
            raise LabelStudioError(f"{here}: data.item_key: {k[:40]!r} is not an item of study {study} "
                                   "(exported from another study, or its key file was replaced)")
        anns = _typed(task.get("annotations", []), list, f"{here}: annotations", "a list")
        for j, a in enumerate(anns):
            where = f"{here}: annotations[{j}]"
            _typed(a, dict, where, "an annotation (an object)")
            n_ann += 1
            aid = a.get("id")
            if aid is not None:
                _typed(aid, int, f"{where}.id", "an annotation id (a whole number)")
            if _typed(a.get("was_cancelled", False), bool, f"{where}.was_cancelled", "true or false"):
                cancelled += 1
                continue
            names = _identities(a.get("completed_by"), f"{where}.completed_by")
            code = next((annotators[n] for n in names if n in annotators), None) if annotators is not None else \
                next((n for n in names if n in codes), None)
            if code is None:
                raise LabelStudioError(
                    f"{where}.completed_by: annotator {names[0]!r} is not a participant of study {study} "
                    + ("(not in --annotators)" if annotators is not None else
                       "(name annotators by their participant code, or map them with --annotators)"))
            answer, rating = _answer_and_rating(a.get("result"), where)
            submitted = _when(a.get("created_at"), f"{where}.created_at")
            seconds = _lead_seconds(a.get("lead_time"), f"{where}.lead_time")
            started = submitted - timedelta(seconds=seconds) if submitted is not None and seconds is not None else None
            out.append(study_import.ImportedAnswer(code, by_key[k], answer, rating, started, submitted, seconds,
                                            f"{where} (annotation id {aid})"))
    return Read(out, n_tasks, n_ann, cancelled)


def _is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def read_annotators(path: Path, codes: set[str]) -> dict[str, str]:
    """The --annotators CSV: columns annotator (a Label Studio e-mail or user id) and code."""
    try:
        with path.open(newline="", encoding="utf-8") as f:
            rows = list(csv.DictReader(f))
            header = list(rows[0]) if rows else []
    except (OSError, UnicodeDecodeError, csv.Error) as e:
        raise LabelStudioError(f"{path}: cannot read it as a UTF-8 CSV ({e})") from e
    if not rows or not {"annotator", "code"} <= set(header):
        raise LabelStudioError(f"{path}: line 1: needs the columns annotator,code and at least one row")
    out: dict[str, str] = {}
    for n, r in enumerate(rows, start=2):
        who, code = (r.get("annotator") or "").strip(), (r.get("code") or "").strip()
        if not who:
            raise LabelStudioError(f"{path}: line {n}: annotator: empty")
        if code not in codes:
            raise LabelStudioError(f"{path}: line {n}: code: {code!r} is not a participant of the study")
        if out.get(who, code) != code:
            raise LabelStudioError(f"{path}: line {n}: annotator: {who!r} is mapped twice")
        out[who] = code
    return out


def import_export(store: Store, study: str, key: bytes, path: Path, annotators_csv: Path | None = None,
                  any_item: bool = False, max_bytes: int = MAX_IMPORT_BYTES) -> dict[str, Any]:
    """Read the export and store its answers all or nothing (`LabelStudioError` for the file,
    `store.study_import.ImportRefused` for a conflict); returns the counts for the summary."""
    codes = {p.code for p in reads.participants(store, study) if not p.admin}
    annotators = read_annotators(annotators_csv, codes) if annotators_csv is not None else None
    got = read_export(path, study, key, list(reads.item_kinds(store, study)), codes, annotators, max_bytes)
    counts = study_import.import_answers(store, study, got.answers, any_item)
    return {"tasks": got.tasks, "annotations": got.annotations, "cancelled": got.cancelled,
            "stored": counts.stored, "already_stored": counts.already,
            "outside_assignment": counts.outside_assignment,
            "participants": len({a.code for a in got.answers})}
