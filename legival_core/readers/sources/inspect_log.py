"""Inspect AI eval logs as a trace source (`legival ingest --from inspect`, docs/sources.md).

A log (`.eval`, Inspect's default, or `.json`) is read through `inspect_ai.log` itself (the `inspect`
extra), one sample at a time, never whole:

- the header by `read_eval_log(header_only=True)`: the task, the model, the epochs, the sample ids;
- `.eval` samples by `read_eval_log_samples_by_id`, a batch at a time (`batch_size`). Not
  `read_eval_log_samples`: it opens the zip again for every sample, parsing its whole central directory
  each time, so a 100,000-sample log would take hours (quadratic); a batch shares one parse. A batch
  Inspect cannot read is halved until the damaged sample is found, and only that one is reported;
- `.json` samples streamed by ijson (the parser Inspect uses for the same file's header) and validated
  as Inspect's own `EvalSample`: Inspect reads a `.json` log's samples only by loading the whole file.

Each sample's bulky transcript fields (`EXCLUDED`: events, store...) are dropped before validation; its
attachments are resolved in the fields read (`resolve_attachments="core"`). One sample is one trace:

    teacher      the log's model (`--teacher` overrides)
    dataset      the log's task name through each dataset's `task_patterns` (`--dataset` overrides)
    problem_id   the sample id; `<id>_epoch_<n>` when the log ran several epochs (Inspect's own member
                 name), so that each epoch's output is a trace of its own
    problem      the sample input (a chat input: its last user message)
    gold_answer  the target (one target: Legi-Val grades against one gold answer)
    reasoning    the reasoning content blocks of the final assistant message, joined by a blank line;
                 without any, the completion is a raw output split at its thinking markers
                 (`<think>`, harmony, [THINK]) as for our own `response` field
    response     the completion (the answer text)
    correct      the first scorer's verdict (C/I, true/false, 1/0; anything else: no verdict), which
                 our graders check (disagreements are counted, as for any file)
    truncated    the output stopped at `max_tokens` / `model_length`, or the sample hit a token limit

A sample the log says holds no trace is skipped and counted, with its reason (`SkippedUnit`: no
`--skip-bad` needed): one that failed in Inspect (`error`), one invalidated, one the header lists but the
log lacks (a run that ended early: the reason names the run's status). A sample with no assistant
message, no input text, several or no targets, or redacted (provider-encrypted) reasoning blocks is a bad
sample, naming its id (`--skip-bad` skips it). A log that cannot be read at all (a truncated zip, not an
Inspect log, a format version newer than the installed Inspect reads), whose task maps to no dataset, or
whose run logged no samples is one file error.

Inspect inflates a `.eval` member whole, and a zip's declared sizes can lie: every member it is about to
inflate is first inflated here, in bounded chunks, and counted (`readers.zip_members`). A sample member
over the limit of one record (`ingest.max_record_bytes`) is a counted skip, never handed to Inspect; a
header or summaries member over it is a file error.
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from legival_core import untrusted_json
from legival_core.readers.input_files import LIMIT_NAME, current_record_limit, regular_file_error
from legival_core.readers.sources import Record, SourceInfo, SourceOptions, dataset_of_task
from legival_core.readers.trace_records import IngestError, SkippedUnit, file_error
from legival_core.readers.zip_members import ZipMembers
from legival_core.registry import register

if TYPE_CHECKING:
    from inspect_ai.log import EvalLog, EvalSample

FORMAT = "inspect"
UNIT = "sample"
BATCH_MAX = 2048
"""Samples per `read_eval_log_samples_by_id` call at most: each call parses the central directory once
(0.3 s for 100,000 samples), so a 100,000-sample log costs 49 parses, not 100,000."""
BATCH_BYTES = 256 << 20
"""What a batch's samples may take, estimated at 10 times their share of the file (zstd-compressed
JSON; the transcript, most of it, is not even read): a log of few, huge samples is read a few at a time."""
EXCLUDED = frozenset({"events", "events_data", "store", "timelines", "error_retries", "model_usage",
                      "role_usage", "model_fallbacks"})
"""Sample fields never read: the transcript and bookkeeping, most of a sample's bytes."""
TRUNCATED_STOPS = frozenset({"max_tokens", "model_length"})
VERDICTS = {"C": True, "I": False}
"""Inspect's CORRECT and INCORRECT score values (booleans and 1/0 are verdicts too; PARTIAL, NOANSWER and
other numbers are not)."""
_JSON_LOG = re.compile(rb'\A\s*\{\s*"version"\s*:\s*\d+\s*,')
_JSON_EVAL = re.compile(rb'"eval"\s*:\s*\{')


def sniff(path: Path) -> bool:
    """A `.eval` file that is a zip, or a `.json` file whose first bytes are an Inspect log's header (a
    top-level object opening with `"version"`, an `"eval"` object next): our JSONL records, batch output
    lines and results files begin otherwise. Reads 4 KB at most; never imports Inspect."""
    name = path.name.lower()
    if not name.endswith((".eval", ".json")) or not path.is_file():
        return False
    try:
        with path.open("rb") as f:
            head = f.read(4096)
    except OSError:
        return False
    if name.endswith(".eval"):
        return head.startswith(b"PK\x03\x04")
    return _JSON_LOG.match(head) is not None and _JSON_EVAL.search(head) is not None


@dataclass(frozen=True, slots=True)
class _Log:
    """What every sample of one log shares."""

    file: str
    teacher: str
    dataset: str
    task: str
    epochs: int

    def error(self, no: int, field: str, message: str) -> IngestError:
        return IngestError(self.file, no, field, message, UNIT)

    def skip(self, no: int, field: str, message: str) -> SkippedUnit:
        """A sample the log itself says holds no trace: counted and listed, not a bad line."""
        return SkippedUnit(self.file, no, field, f"{message}: no trace", UNIT)

    def who(self, sample_id: Any, epoch: int) -> str:
        return f"sample id {sample_id!r}" + (f" epoch {epoch}" if self.epochs > 1 else "")


def read_inspect(path: Path, options: SourceOptions) -> Iterator[Record]:
    _check_path(path)
    members = ZipMembers.of(path) if path.name.lower().endswith(".eval") else None  # checked before Inspect reads
    try:
        yield from _read(path, options, members)
    finally:
        if members is not None:
            members.close()


def _read(path: Path, options: SourceOptions, members: ZipMembers | None) -> Iterator[Record]:
    where = str(path)
    header = _header(path, members)
    if members is None and path.name.lower().endswith(".eval"):  # Inspect read its header, our check could not
        raise file_error(where, "not a readable Inspect log (its zip directory cannot be read)")
    task = header.eval.task or ""
    dataset = dataset_of_task(task, options.dataset, where, 0, "file")
    if isinstance(dataset, IngestError):
        raise dataset
    if header.eval.config.log_samples is False:
        raise file_error(where, "the run logged no samples (log_samples=False, --no-log-samples): it holds no "
                                "trace; run the task again with samples logged")
    epochs = max(1, header.eval.config.epochs or 1)
    log = _Log(where, options.teacher or header.eval.model, dataset, task, epochs)
    samples = _eval_samples(path, header, members) if members is not None else _json_samples(path, header)
    for no, (sample_id, epoch, got) in enumerate(samples, start=1):
        if got is MISSING:
            yield no, log.skip(no, "<sample>", f"{log.who(sample_id, epoch)}: not in the log (the run ended "
                               f"with status {header.status!r}{_why(header)})")
        elif isinstance(got, _TooLarge):
            yield no, SkippedUnit(where, no, "<sample>", f"{log.who(sample_id, epoch)}: {got.why}; not read (a "
                                  "decompression bomb? the log's other samples are read)", UNIT)
        elif isinstance(got, str):
            yield no, log.error(no, "<sample>", f"{log.who(sample_id, epoch)}: {got}")
        else:
            yield no, _record(got, log, no)


# ------------------------------------------------------------------------------------------ reading


def _check_path(path: Path) -> None:
    """A file error for a path that is no Inspect log file: a directory, missing, a pipe or a device,
    not named .eval or .json."""
    if path.is_dir():
        raise file_error(str(path), "is a directory (give the .eval or .json log files in it)")
    special = regular_file_error(path, "an Inspect log is read by seeking in it and more than once (a .eval "
                                       "log is a zip, whose directory is at its end)")
    if special is not None:
        raise file_error(special.file, special.message)
    if not path.is_file():
        raise file_error(str(path), "no such file")
    if not path.name.lower().endswith((".eval", ".json")):
        raise file_error(str(path), "an Inspect log is a .eval or .json file (Inspect tells them by name)")


HEADER_MEMBERS = ("header.json", "reductions.json", "_journal/start.json", "_journal/config_updates/")
"""What Inspect inflates to read a `.eval` log's header (a running log has only its journal's start)."""
SUMMARY_MEMBERS = ("summaries.json", "_journal/summaries/")


def _check_members(path: Path, members: ZipMembers | None, which: tuple[str, ...]) -> None:
    """A file error when one of the members Inspect is about to inflate whole (`which`: names, or folders
    ending in '/') declares or inflates to more than the limit of one record: the log cannot be read
    without it, and is not read at all."""
    limit = current_record_limit()
    over = members.first_over(which, limit) if members is not None else None
    if over is not None:
        raise file_error(str(path), f"not a readable Inspect log: its member {over[0]} {over[1]}, over {LIMIT_NAME} "
                                    f"({limit:,} bytes): not read (a decompression bomb?)")


def _header(path: Path, members: ZipMembers | None = None) -> EvalLog:
    """The log's header (no samples), or a file error saying why the file is no Inspect log."""
    from inspect_ai.log import read_eval_log

    _check_members(path, members, HEADER_MEMBERS)
    try:
        if path.name.lower().endswith(".json"):  # Inspect's header read keeps a prefix string per level
            with path.open("rb") as f:
                untrusted_json.check_members(f, stop="samples")
        header = read_eval_log(str(path), header_only=True)
        _known_version(header.version)
    except Exception as e:  # noqa: BLE001  any failure of the reader means the file is unreadable as a log
        raise file_error(str(path), f"not a readable Inspect log ({_reason(e)})") from None
    return header


def _known_version(version: int) -> None:
    """Inspect's own check of a log's format version, which it makes for a `.json` log and not for a
    `.eval` one: one check, one message for both (a log of a newer format than the installed Inspect
    reads is refused, not read as if it were of the old one)."""
    try:
        from inspect_ai._util.constants import LOG_SCHEMA_VERSION
    except ImportError:  # pragma: no cover - Inspect moved it: the version its logs are written in today
        LOG_SCHEMA_VERSION = 2  # noqa: N806
    if not isinstance(version, int) or version > LOG_SCHEMA_VERSION:
        raise ValueError(f"Unable to read version {version} of log format.")  # Inspect's words for a .json log


def _reason(e: BaseException) -> str:
    """An exception as a short phrase for a one-line error: Inspect's own cause where it wraps one
    ("Unable to read log file: PATH" says nothing), the first line of a parser's message."""
    while e.__cause__ is not None and "Unable to read log file" in str(e):
        e = e.__cause__
    raw = str(e)
    if raw.startswith(("b'", 'b"')):  # ijson's C parser: the repr of its bytes message
        raw = raw[2:].split("\\n")[0]
    first = next((ln.strip() for ln in raw.splitlines() if ln.strip()), "")
    text = first if first and not isinstance(e, KeyError) else f"{type(e).__name__}{': ' + first if first else ''}"
    if any(w in text.lower() for w in ("eocd", "central directory", "zip file", "corrupt zip64")):
        text += "; the end of the zip is missing or damaged: a .eval log cut short (a copy or download interrupted?)"
    if text.startswith("Unable to read version "):  # ours for a .eval log (`_known_version`), Inspect's for a .json one
        from importlib.metadata import version

        text = f"{text.rstrip('.')}: a newer format than the installed Inspect reads (inspect_ai {version('inspect_ai')})" \
               ": upgrade it"
    return text[:300]


@dataclass(frozen=True, slots=True)
class _TooLarge:
    """A sample whose member is over the limit of one record: skipped, never inflated whole."""

    why: str


MISSING = "<not in the log>"
"""A sample the header lists and the log lacks (the run ended before it)."""
Sampled = tuple[Any, int, "EvalSample | str | _TooLarge"]
"""(sample id, epoch, the sample, or MISSING, or why Inspect could not read it)."""


def _eval_samples(path: Path, header: EvalLog, members: ZipMembers) -> Iterator[Sampled]:
    """The samples of a `.eval` log in Inspect's order (each id's epochs in turn), a batch per read; a
    sample whose member is over the limit of one record is never handed to Inspect (`_TooLarge`)."""
    from inspect_ai.log import read_eval_log_sample_summaries

    epochs = max(1, header.eval.config.epochs or 1)
    ids = header.eval.dataset.sample_ids
    present: set[tuple[str, int]] | None = None
    if ids is None or header.status != "success":  # the summaries list what was actually written
        _check_members(path, members, SUMMARY_MEMBERS)
        try:
            summaries = read_eval_log_sample_summaries(str(path))
        except Exception as e:  # noqa: BLE001
            raise file_error(str(path), f"not a readable Inspect log ({_reason(e)})") from None
        present = {(str(s.id), s.epoch) for s in summaries}
        if ids is None:
            ids = list(dict.fromkeys(s.id for s in summaries))
    keys = [(i, e) for i in ids for e in range(1, epochs + 1)]
    size = batch_size(path.stat().st_size, len(keys))
    limit = current_record_limit()
    for start in range(0, len(keys), size):
        batch = keys[start : start + size]
        wanted = [k for k in batch if present is None or (str(k[0]), k[1]) in present]
        large: dict[tuple[str, int], EvalSample | str | _TooLarge] = {}
        for k in wanted:
            member = f"samples/{k[0]}_epoch_{k[1]}.json"  # Inspect's name for it
            why = members.over(member, limit)
            if why is not None:
                large[(str(k[0]), k[1])] = _TooLarge(f"its member {member} {why}, over {LIMIT_NAME} ({limit:,} bytes)")
        got = {**_read_batch(path, [k for k in wanted if (str(k[0]), k[1]) not in large]), **large}
        for sample_id, epoch in batch:
            yield sample_id, epoch, got.get((str(sample_id), epoch), MISSING)


def batch_size(file_bytes: int, samples: int) -> int:
    """Samples per read: `BATCH_BYTES` over each sample's estimated size, within 1..`BATCH_MAX`."""
    per_sample = 10 * file_bytes / max(samples, 1)
    return max(1, min(BATCH_MAX, int(BATCH_BYTES / max(per_sample, 1.0))))


def _why(header: EvalLog) -> str:
    err = header.error
    return f": {' '.join(err.message.split())[:200]}" if err is not None and err.message else ""


def _read_batch(path: Path, keys: list[tuple[Any, int]]) -> dict[tuple[str, int], EvalSample | str]:
    """(str id, epoch) -> sample, read in one call; a batch Inspect cannot read is halved until the
    damaged sample is alone (its error, with Inspect's reason): a few central-directory parses per
    damaged sample, not one per sample of its batch."""
    from inspect_ai.log import read_eval_log_samples_by_id

    if not keys:
        return {}
    try:
        samples = read_eval_log_samples_by_id(str(path), keys, exclude_fields=set(EXCLUDED),
                                              resolve_attachments="core")
        return {(str(s.id), s.epoch): s for s in samples}
    except Exception as e:  # noqa: BLE001  any failure of the reader: find the sample it is about
        if len(keys) == 1:
            return {(str(keys[0][0]), keys[0][1]): f"Inspect cannot read it ({_reason(e)})"}
    half = len(keys) // 2
    return {**_read_batch(path, keys[:half]), **_read_batch(path, keys[half:])}


def _json_samples(path: Path, header: EvalLog) -> Iterator[Sampled]:
    """The samples of a `.json` log, streamed (ijson over `samples.item`), each validated as Inspect's
    `EvalSample`; then, for a run that did not succeed, an error for each sample the header lists and
    the log lacks (as for `.eval`). A file with NaN or Infinity (which Inspect writes and ijson refuses)
    is read on the way Inspect reads it, whole; one cut short or not JSON is a file error."""
    seen: set[tuple[str, int]] = set()
    for got in _json_stream(path):
        seen.add((str(got[0]), got[1]))
        yield got
    ids = header.eval.dataset.sample_ids
    if header.status != "success" and ids is not None:
        for sample_id in ids:
            for epoch in range(1, max(1, header.eval.config.epochs or 1) + 1):
                if (str(sample_id), epoch) not in seen:
                    yield sample_id, epoch, MISSING


def _json_stream(path: Path) -> Iterator[Sampled]:
    import ijson
    from inspect_ai.log import EvalSample, resolve_sample_attachments
    from pydantic import ValidationError

    done = 0
    try:
        with path.open("rb") as f:
            for item in untrusted_json.array_items(f, "samples"):
                done += 1
                yield _validated(item, EvalSample, resolve_sample_attachments, ValidationError)
    except untrusted_json.JsonRefused as e:  # past a limit (depth, a number, a lone surrogate, a key twice)
        raise IngestError(str(path), done + 1, e.field or "<sample>", e.msg, UNIT) from None
    except ijson.JSONError as e:
        message = str(e)
        if "premature EOF" in message or "incomplete JSON" in message.lower():
            raise file_error(str(path), f"not a readable Inspect log: it ends after {done} sample(s) "
                                        "(cut short?)") from None
        if "NaN" not in message and "Infinity" not in message:
            raise file_error(str(path), f"not a readable Inspect log: invalid JSON after {done} sample(s) "
                                        f"({_reason(e)})") from None
        yield from _whole_json(path, done)  # NaN / Infinity: valid to Inspect, not to ijson


def _validated(item: Any, model: Any, resolve: Any, invalid: type[Exception]) -> Sampled:
    if not isinstance(item, dict):
        return None, 0, f"is not a JSON object ({type(item).__name__})"
    sample_id = item.get("id")
    epoch = item["epoch"] if isinstance(item.get("epoch"), int) else 0
    for k in EXCLUDED:
        item.pop(k, None)
    try:
        sample = resolve(model.model_validate(item), "core")
    except invalid as e:
        err = e.errors()[0]  # type: ignore[attr-defined]
        loc = ".".join(str(x) for x in err["loc"]) or "<sample>"
        return sample_id, epoch, f"field {loc!r}: {err['msg']} (not an Inspect sample)"
    return sample.id, sample.epoch, sample


def _whole_json(path: Path, done: int) -> Iterator[Sampled]:
    """The samples after the first `done`, from the whole log read by Inspect (its JSON reader takes
    NaN and Infinity)."""
    from inspect_ai.log import read_eval_log

    try:
        log = read_eval_log(str(path), resolve_attachments="core")
    except Exception as e:  # noqa: BLE001
        raise file_error(str(path), f"not a readable Inspect log ({_reason(e)})") from None
    for sample in (log.samples or [])[done:]:
        yield sample.id, sample.epoch, sample


# ------------------------------------------------------------------------------------------ records


def _record(s: EvalSample, log: _Log, no: int) -> dict[str, Any] | IngestError:
    """One sample as a record of our trace schema (module docstring), or the error of that sample."""
    from inspect_ai.model import ChatMessageAssistant, ContentReasoning

    who = log.who(s.id, s.epoch)
    if s.invalidation is not None:
        return log.skip(no, "invalidation", f"{who} was invalidated in Inspect"
                        + (f" ({s.invalidation.reason})" if getattr(s.invalidation, "reason", None) else ""))
    if s.error is not None:
        return log.skip(no, "error", f"{who} failed in Inspect ({' '.join(s.error.message.split())[:200]})")
    final = next((m for m in reversed(s.messages) if isinstance(m, ChatMessageAssistant)), None)
    if final is None:
        return log.error(no, "messages", f"{who}: no assistant message (the model never answered)")
    problem = _input_text(s.input)
    if not problem.strip():
        return log.error(no, "input", f"{who}: no input text (a chat input without a user message?)")
    targets = [s.target] if isinstance(s.target, str) else list(s.target)
    if len(targets) != 1 or not targets[0].strip():
        what = "an empty target" if len(targets) == 1 else f"{len(targets)} targets {targets[:3]!r}"
        return log.error(no, "target", f"{who} has {what}: Legi-Val grades against one gold answer")
    blocks = [c for c in final.content if isinstance(c, ContentReasoning)] if isinstance(final.content, list) else []
    redacted = [b for b in blocks if b.redacted]
    if redacted:
        return log.error(no, "reasoning", f"{who}: {len(redacted)} of {len(blocks)} reasoning blocks are redacted "
                         "(encrypted by the provider): no reasoning text to measure")
    answer = s.output.completion if s.output.choices else final.text
    stop = s.output.choices[0].stop_reason if s.output.choices else None
    rec: dict[str, Any] = {
        "teacher": log.teacher, "dataset": log.dataset,
        "problem_id": f"{s.id}_epoch_{s.epoch}" if log.epochs > 1 else str(s.id),
        "problem": problem, "gold_answer": targets[0],
        "response": answer,
        "truncated": stop in TRUNCATED_STOPS or (s.limit is not None and s.limit.type == "token"),
        "task": log.task, "sample_id": s.id, "epoch": s.epoch,
    }
    if blocks:
        rec["reasoning"] = "\n\n".join(b.reasoning for b in blocks)
    if s.choices:
        rec["choices"] = list(s.choices)
    scorer, value = next(iter((s.scores or {}).items()), (None, None))
    if scorer is not None:
        rec["correct"] = _verdict(value.value if value is not None else None)
        rec["scorer"] = scorer
        rec["score"] = _storable(value.value if value is not None else None)
    return rec


def _input_text(value: str | Iterable[Any]) -> str:
    """The problem a sample's input states: the input itself, or a chat input's last user message."""
    from inspect_ai.model import ChatMessageUser

    if isinstance(value, str):
        return value
    users = [m for m in value if isinstance(m, ChatMessageUser)]
    return users[-1].text if users else ""


def _verdict(value: Any) -> bool | None:
    if isinstance(value, str):
        return VERDICTS.get(value.strip().upper())
    if isinstance(value, bool):
        return value
    if isinstance(value, int | float) and value in (0, 1):
        return value == 1
    return None


def _storable(value: Any) -> Any:
    """A score value as it can be kept in the trace's provenance (JSON: no NaN or infinity)."""
    if isinstance(value, float) and not math.isfinite(value):
        return str(value)
    if isinstance(value, str | int | float | bool) or value is None:
        return value
    return str(value)[:200]


register("format", FORMAT, read_inspect, aliases=("inspect-ai", "inspect_ai"),
         description="Inspect AI eval logs (.eval, .json): one trace per sample",
         meta=SourceInfo(unit=UNIT, sniff=sniff, extra="inspect", module="inspect_ai", options=("dataset",),
                         order=10, description="an Inspect AI eval log (.eval or .json)", key=("sample_id", "epoch")))
