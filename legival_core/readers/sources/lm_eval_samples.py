"""lm-evaluation-harness `--log_samples` output as trace records (docs/sources.md).

`lm_eval ... --log_samples --output_path OUT` writes, for each task of a run, `samples_<task>_<date>.jsonl`
beside the run's `results_<date>.json` (or `<name>_<date>.json` when OUT names a .json file). A line is one
doc under one filter: `doc_id`, `doc` (the task's processed dataset row), `resps` (the raw generations:
`[[text, ...]]`, one per repeat), `filtered_resps`, `filter`, and each metric's value. The results JSON holds
what the lines do not: the model (`model_name`) and each task's configuration (its `output_type`,
`dataset_path`, split).

What a record takes from it:
- teacher: the results JSON's `model_name` (`--teacher` over it); the task is the file name's, and the
  dataset follows from it (`sources.dataset_of_task`: each dataset's own `task_patterns`; `--dataset`
  otherwise);
- problem and gold: from the doc, by the dataset's layout in lm-eval's tasks (`_LAYOUTS`), through the
  dataset module's own gold extraction (GSM8K's `####`, MATH's last `\\boxed{}` of the solution, GPQA's
  options and prompt); `--map problem=F,gold_answer=F[,problem_id=F,choices=F]` names other doc fields
  (and is required for a dataset with no layout here);
- the raw output: `resps` (reasoning split at its thinking markers as for any raw output); lm-eval's own
  verdict is the first 0/1 metric of the line (`correct`, compared with our grade).

A task with several filters (gsm8k: strict-match, flexible-extract) writes every doc once per filter, the
same generation each time: the lines of the file's first filter are read (that filter's verdict), the
others are skipped, so the file is still read as a stream (a few bytes of state, whatever its size). Only
`generate_until` tasks have generated text; a log-likelihood task is refused. Problem ids: an id the doc
carries (MATH-500's `unique_id`, GPQA's `Record ID`), GSM8K's own `gsm8k-<split>-<row>` for the public
GSM8K, else `<task>-<doc_id>`.
"""

from __future__ import annotations

import hashlib
import importlib
import re
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from functools import cache
from pathlib import Path
from typing import Any

from legival_core import untrusted_json
from legival_core.grading.extract import last_boxed
from legival_core.readers.input_files import (
    COMPRESSED_SUFFIXES,
    InputFileError,
    open_input,
    read_lines,
    special_file,
)
from legival_core.readers.records import LineProblem, parse_json_line
from legival_core.readers.sources import Record, SourceInfo, SourceOptions, dataset_of_task
from legival_core.readers.trace_records import IngestError, file_error
from legival_core.registry import entry, register

NAME = "lm-eval"
UNIT = "line"
_DATE = r"\d{4}-\d{2}-\d{2}T\d{2}-\d{2}-\d{2}(?:\.\d+)?"
_SAMPLES_NAME = re.compile(rf"^samples_.+_{_DATE}\.jsonl(?:{'|'.join(map(re.escape, COMPRESSED_SUFFIXES))})?$",
                           re.IGNORECASE)
_HEAD = b'{"doc_id": '
"""How lm-eval starts every line it writes (`json.dumps` of the sample, `doc_id` first)."""
MAPPABLE = ("problem", "gold_answer", "problem_id", "choices")
"""Our fields a `--map` may name a doc field for (the output and the model come from the sample and run)."""
_PUBLIC_GSM8K = ("gsm8k", "openai/gsm8k")


class _Bad(Exception):
    """One field of one sample is wrong: (field, message), turned into an IngestError by the reader."""

    def __init__(self, field: str, message: str) -> None:
        super().__init__(message)
        self.field, self.message = field, message


@dataclass(frozen=True, slots=True)
class Run:
    """What the samples file's results JSON says about it."""

    task: str
    model: str
    dataset: str
    config: dict[str, Any]

    @property
    def split(self) -> str:
        """The split lm-eval evaluated (its test split, else its validation split)."""
        return str(self.config.get("test_split") or self.config.get("validation_split") or "test")


@dataclass(frozen=True, slots=True)
class Doc:
    """One sample's doc and where it is (errors name its doc_id and the doc's fields)."""

    fields: dict[str, Any]
    doc_id: int
    target: Any
    names: dict[str, str]
    """Our field -> the doc field it is read from (`--map`, over the layout's)."""

    def name(self, ours: str, default: str) -> str:
        return self.names.get(ours, default)

    def get(self, ours: str, default: str) -> Any:
        """The doc field our field `ours` is read from (`--map`'s, else `default`); a mapped `target`
        absent from the doc is the sample's own (lm-eval's doc_to_target)."""
        name = self.name(ours, default)
        if name in self.fields:
            return self.fields[name]
        if name == "target" and ours in self.names:
            return self.target
        raise _Bad(f"doc.{name}", f"not in the doc of doc_id {self.doc_id} (its fields: "
                   f"{', '.join(sorted(self.fields)) or 'none'}); name the doc's fields with "
                   "--map problem=FIELD,gold_answer=FIELD")

    def text(self, ours: str, default: str) -> str:
        value = self.get(ours, default)
        if isinstance(value, int | float) and not isinstance(value, bool):
            return str(value)
        if not isinstance(value, str) or not value.strip():
            raise _Bad(f"doc.{self.name(ours, default)}", f"expected text, got {repr(value)[:60]} "
                       f"(doc_id {self.doc_id})")
        return value


@cache
def _dataset_module(dataset: str) -> Any:
    """The module that registered `dataset`, reached through the registry: `datasets` sits beside
    `grading` in the layers and imports it, so importing it from here would close a cycle."""
    spec = entry("dataset", dataset).obj
    return importlib.import_module(next(iter(spec.loaders.values())).__module__)


def _gsm8k(doc: Doc, run: Run) -> dict[str, Any]:
    """lm-eval's gsm8k tasks keep GSM8K's row: `question`, and `answer` ending in `#### <number>` (a field
    `--map` names may hold the bare number instead: lm-eval's `target`)."""
    answer = doc.text("gold_answer", "answer")
    mapped = "gold_answer" in doc.names and "####" not in answer
    gold = answer.strip() if mapped else _dataset_module("gsm8k").gold_from_solution(answer)
    if not gold:
        raise _Bad(f"doc.{doc.name('gold_answer', 'answer')}", f"has no '#### <number>' (doc_id {doc.doc_id})")
    out = {"problem": doc.text("problem", "question"), "gold_answer": gold}
    if str(run.config.get("dataset_path") or "").lower() in _PUBLIC_GSM8K:
        out["problem_id"] = f"gsm8k-{run.split}-{doc.doc_id}"  # the ids of our loader and the shared traces
    return out


def _math(doc: Doc, run: Run) -> dict[str, Any]:
    """minerva_math_* / hendrycks_math_*: `problem`, `solution`; lm-eval's `answer` is its own rewrite of
    the solution's box (minerva normalizes it), so the gold is the last box of the solution, as our MATH
    loader reads a row (the public files' `answer` is that box), `answer` only without one."""
    if "gold_answer" in doc.names:
        value = doc.text("gold_answer", "solution")
        gold = last_boxed(value) or value
    else:
        solution = doc.fields.get("solution")
        gold = (last_boxed(solution) if isinstance(solution, str) else None) or doc.text("gold_answer", "answer")
    out = {"problem": doc.text("problem", "problem"), "gold_answer": gold}
    if isinstance(doc.fields.get("unique_id"), str) and doc.fields["unique_id"]:
        out["problem_id"] = doc.fields["unique_id"]  # MATH-500's own id (test/precalculus/807.json)
    return out


def _gpqa(doc: Doc, run: Run) -> dict[str, Any]:
    """gpqa_* / leaderboard_gpqa_*: GPQA's row (`Question`, `Correct Answer`, `Incorrect Answer 1-3`,
    `Record ID`) plus the options in the order lm-eval shuffled them (`choices` or `choice1`-`choice4`)
    and the gold `answer` "(B)". The problem is our GPQA prompt over the options in that order; its id is
    our loader's `gpqa-<Record ID>` where the order is ours, else that id with the order's hash (the same
    question with other letters is another problem)."""
    gpqa = _dataset_module("gpqa")
    split = [f"choice{i + 1}" for i in range(len(gpqa.LETTERS))]
    if "choices" in doc.names or "choices" in doc.fields or not all(c in doc.fields for c in split):
        choices = doc.get("choices", "choices")
    else:
        choices = [doc.fields[c] for c in split]
    if not isinstance(choices, list) or len(choices) != len(gpqa.LETTERS) or \
            not all(isinstance(c, str) for c in choices):
        raise _Bad(f"doc.{doc.name('choices', 'choices')}", f"expected {len(gpqa.LETTERS)} options as text (in the "
                   f"order the model saw them), got {repr(choices)[:80]} (doc_id {doc.doc_id})")
    question = doc.text("problem", "Question").strip()
    answer = doc.text("gold_answer", "answer").strip()
    m = re.fullmatch(rf"\(?([{gpqa.LETTERS}])\)?", answer.upper())
    if m is None:
        raise _Bad(f"doc.{doc.name('gold_answer', 'answer')}", f"expected a letter such as (B), got "
                   f"{answer[:40]!r} (doc_id {doc.doc_id})")
    out: dict[str, Any] = {"problem": gpqa.format_question(question, tuple(choices)), "gold_answer": m.group(1),
                           "choices": list(choices)}
    record = doc.fields.get("Record ID")
    columns = ("Correct Answer", "Incorrect Answer 1", "Incorrect Answer 2", "Incorrect Answer 3")
    if isinstance(record, str) and record.strip():
        pid = f"gpqa-{record.strip()}"
        raw = [doc.fields.get(c) for c in columns]
        ours = gpqa.shuffled_choices(pid, str(raw[0]).strip(), [str(x).strip() for x in raw[1:]])[0] \
            if all(isinstance(x, str) for x in raw) else None
        if ours != tuple(choices):
            pid += "@" + hashlib.sha256("\x1f".join(choices).encode("utf-8")).hexdigest()[:8]
        out["problem_id"] = pid
    return out


Layout = Callable[[Doc, Run], dict[str, Any]]
_LAYOUTS: dict[str, Layout] = {"gsm8k": _gsm8k, "math": _math, "gpqa": _gpqa}
"""How lm-eval's tasks of a registered dataset lay out their docs (a dataset not here needs --map)."""


def _mapped(doc: Doc, run: Run) -> dict[str, Any]:
    """A dataset with no layout here: the doc fields `--map` names, taken as they are (the reader has
    checked that it names both)."""
    return {"problem": doc.text("problem", "problem"), "gold_answer": doc.text("gold_answer", "gold_answer")}


def _sample_record(rec: dict[str, Any], run: Run, names: dict[str, str]) -> list[dict[str, Any]]:
    """The records of one sample line: one per generation (a task with `repeats` has several)."""
    doc_id = rec.get("doc_id")
    if isinstance(doc_id, bool) or not isinstance(doc_id, int) or doc_id < 0:
        raise _Bad("doc_id", f"expected the doc's index (an integer >= 0), got {repr(doc_id)[:60]}")
    fields = rec.get("doc")
    if not isinstance(fields, dict):
        raise _Bad("doc", f"expected the task's doc (a JSON object), got {repr(fields)[:60]} (doc_id {doc_id})")
    resps = rec.get("resps")
    if not (isinstance(resps, list) and len(resps) == 1 and isinstance(resps[0], list) and resps[0]
            and all(isinstance(r, str) for r in resps[0])):
        raise _Bad("resps", f"expected the generated text as [[text, ...]] (a generate_until sample), got "
                   f"{repr(resps)[:80]} (doc_id {doc_id})")
    doc = Doc(fields, doc_id, rec.get("target"), names)
    layout = _LAYOUTS.get(run.dataset, _mapped)
    base = layout(doc, run)
    if "problem_id" in names:
        pid = doc.get("problem_id", "problem_id")
        if not isinstance(pid, str | int) or isinstance(pid, bool) or str(pid) == "":
            raise _Bad(f"doc.{names['problem_id']}", f"expected an id, got {repr(pid)[:60]} (doc_id {doc_id})")
        base["problem_id"] = str(pid)
    base.setdefault("problem_id", f"{run.task}-{doc_id}")
    if "choices" in names and "choices" not in base:
        choices = doc.get("choices", "choices")
        if not isinstance(choices, list) or not all(isinstance(c, str) for c in choices):
            raise _Bad(f"doc.{names['choices']}", f"expected the options as a list of text, got "
                       f"{repr(choices)[:80]} (doc_id {doc_id})")
        base["choices"] = choices
    metrics = rec.get("metrics")
    scores = {m: rec[m] for m in metrics if isinstance(m, str) and m in rec} if isinstance(metrics, list) else {}
    verdict = next((bool(v) for v in scores.values()
                    if isinstance(v, int | float) and not isinstance(v, bool) and v in (0, 1)), None)
    filtered = rec.get("filtered_resps")
    one = len(resps[0]) == 1
    extra = {"lm_eval_task": run.task, "lm_eval_doc_id": doc_id, "lm_eval_filter": rec.get("filter"),
             "lm_eval_metrics": scores, "lm_eval_target": rec.get("target"),
             "lm_eval_prompt_hash": rec.get("prompt_hash")}
    if one and isinstance(filtered, list) and len(filtered) == 1 and filtered[0] != resps[0][0]:
        extra["lm_eval_filtered_resp"] = filtered[0]  # what the filter extracted (not a second copy of the output)
    out = []
    for k, text in enumerate(resps[0]):
        r = {"model": run.model, "dataset": run.dataset, **base, "response": text, **extra}
        if one:
            r["correct"] = verdict  # a repeated task's verdict is of the vote, not of one generation
        else:
            r["lm_eval_repeat"] = k
        out.append({k2: v for k2, v in r.items() if v is not None})
    return out


def _plain_name(path: Path) -> str:
    name = path.name
    for suffix in COMPRESSED_SUFFIXES:
        if name.lower().endswith(suffix):
            return name[: -len(suffix)]
    return name


def _results_json(path: Path, date: str) -> Path:
    """The run's results JSON beside the samples: `results_<date>.json`, or `<name>_<date>.json` (lm-eval
    names it so when `--output_path` is a .json file)."""
    own = path.parent / f"results_{date}.json"
    if own.is_file():
        return own
    others = sorted(p for p in path.parent.glob(f"*_{date}.json") if p.is_file())
    if not others:
        raise file_error(str(path), f"no results JSON of its run beside it (results_{date}.json, which lm-eval "
                                    "writes with the samples: the model and the task's configuration are read "
                                    "from it; copy it next to the samples file)")
    return others[0]


def _run_of(path: Path, options: SourceOptions) -> Run:
    """The task (from the file name, as lm-eval names it), the model and the task's config (from the
    results JSON), and the dataset; a file-level IngestError for what makes the whole file unreadable."""
    from lm_eval.utils import get_file_datetime, get_file_task_name

    try:
        if special_file(path) is None:  # a pipe is read once, below
            open_input(path).close()  # a missing file, a directory, an archive: said before its run is looked for
    except InputFileError as e:
        raise file_error(e.file, e.message) from None
    name = _plain_name(path)
    if not _SAMPLES_NAME.match(path.name):
        raise file_error(str(path), "is not named as lm-eval names a samples file (samples_<task>_<date>.jsonl, "
                                    "beside results_<date>.json): the task and the run are read from the name")
    task, date = get_file_task_name(name), get_file_datetime(name)
    results_path = _results_json(path, date)
    try:
        results = untrusted_json.loads(results_path.read_bytes())
    except (OSError, ValueError, RecursionError) as e:
        raise file_error(str(path), f"its results JSON {results_path} cannot be read "
                                    f"({getattr(e, 'strerror', None) or str(e).split(';')[0]})") from None
    configs = results.get("configs") if isinstance(results, dict) else None
    config = configs.get(task) if isinstance(configs, dict) else None
    if not isinstance(config, dict):
        held = ", ".join(sorted(configs)) if isinstance(configs, dict) else "none"
        raise file_error(str(path), f"its results JSON {results_path} has no configuration of task {task!r} "
                                    f"(configs: {held or 'none'})")
    kind = config.get("output_type")
    if kind != "generate_until":
        what = f"a {kind} task" if isinstance(kind, str) else "a task of no output_type"
        raise file_error(str(path), f"task {task!r} is {what} (lm-eval scores given options by "
                                    "log-likelihood): its samples hold no generated text, only generate_until "
                                    "tasks have traces")
    model = options.teacher or _model_name(results)
    if not model:
        raise file_error(str(path), f"its results JSON {results_path} names no model (model_name): give --teacher NAME")
    dataset = dataset_of_task(task, options.dataset, str(path), 0, "file")
    if isinstance(dataset, IngestError):
        raise dataset
    return Run(task, model, dataset, config)


def _model_name(results: dict[str, Any]) -> str | None:
    name = results.get("model_name")
    if isinstance(name, str) and name:
        return name
    args = (results.get("config") or {}).get("model_args")  # older lm-eval: the model's arguments only
    if isinstance(args, dict):
        return str(args.get("pretrained") or args.get("model") or "") or None
    if isinstance(args, str):
        pairs = dict(p.partition("=")[::2] for p in args.split(",") if "=" in p)
        return pairs.get("pretrained") or pairs.get("model") or None
    return None


def _names(path: Path, options: SourceOptions) -> dict[str, str]:
    names = dict(options.mapping)
    wrong = [k for k in names if k not in MAPPABLE]
    if wrong:
        raise file_error(str(path), f"--map {wrong[0]}: an lm-eval sample's output is its resps and its model the "
                                    f"results JSON's; --map names doc fields for {', '.join(MAPPABLE)}")
    return names


def read_lm_eval(path: Path, options: SourceOptions) -> Iterator[Record]:
    """(line, record or its error) for the samples of the file's first filter (module docstring)."""
    run = _run_of(path, options)
    names = _names(path, options)
    where = str(path)
    first: str | None = None
    checked = False
    try:
        for line, raw in read_lines(path):
            if not raw.strip() or first is not None and _other_filter(raw, first):
                continue  # the same generation under another filter (module docstring), not even parsed
            rec = parse_json_line(raw, line)
            if isinstance(rec, LineProblem):
                yield line, IngestError(where, line, rec.field, rec.message, UNIT)
                continue
            flt = rec.get("filter")
            if not isinstance(flt, str):
                yield line, IngestError(where, line, "filter", f"expected the filter's name, got {repr(flt)[:60]}", UNIT)
                continue
            if first is None:
                first = flt
            if flt != first:
                continue  # the same generation under another filter (module docstring)
            if not checked and run.dataset not in _LAYOUTS and not {"problem", "gold_answer"} <= set(names):
                doc = rec.get("doc")
                held = ", ".join(sorted(doc)) if isinstance(doc, dict) else "none"
                raise file_error(where, f"lm-eval docs of dataset {run.dataset!r} have no layout Legi-Val knows: "
                                        f"name the doc's fields with --map problem=FIELD,gold_answer=FIELD "
                                        f"(the doc's fields: {held})")
            checked = True
            try:
                for r in _sample_record(rec, run, names):
                    yield line, r
            except _Bad as e:
                yield line, IngestError(where, line, e.field, e.message, UNIT)
    except InputFileError as e:
        raise file_error(e.file, e.message) from None


_FILTER_KEY = b'"filter": "'
_FILTER_VALUE = re.compile(rb'"filter": ("(?:[^"\\]|\\.)*")')


def _other_filter(raw: bytes, first: str) -> bool:
    """Whether a line, as lm-eval writes it, is of a filter other than `first`, told without parsing it:
    `filter` is the last top-level key before the metrics (numbers), so its last occurrence is the key
    itself (a doc's own "filter" comes before it; a quote inside a string is escaped). Anything unexpected
    answers no, and the line is parsed."""
    at = raw.rfind(_FILTER_KEY)
    m = _FILTER_VALUE.match(raw, at) if at >= 0 else None
    if m is None:
        return False
    try:
        return bool(untrusted_json.loads(m.group(1), text=False) != first)
    except ValueError:
        return False


def _sniff(path: Path) -> bool:
    """Named as lm-eval names a samples file, or starting as lm-eval starts each line."""
    if _SAMPLES_NAME.match(path.name):
        return True
    try:
        with path.open("rb") as f:
            return f.read(len(_HEAD)) == _HEAD
    except OSError:
        return False


register("format", NAME, read_lm_eval, aliases=("lm_eval", "lm-evaluation-harness"),
         description="lm-evaluation-harness --log_samples output (samples_<task>_<date>.jsonl beside its results JSON)",
         meta=SourceInfo(unit=UNIT, sniff=_sniff, extra="lm-eval", module="lm_eval", options=("dataset", "mapping"),
                         order=20, description="lm-evaluation-harness --log_samples output",
                         key=("lm_eval_doc_id", "lm_eval_repeat")))
