"""Trace sources: the files labs already have, read as trace records (docs/sources.md).

A source turns one input (an Inspect AI log, lm-evaluation-harness samples, a Hugging Face dataset, an
OpenAI batch output, or Legi-Val's own JSONL/Parquet) into records of our trace schema
(`readers.trace_records.TraceRecord`: teacher, dataset, problem_id, problem, gold_answer, reasoning or a
raw response, the source's own verdict as `correct`), numbered by the source's unit (a line, a row, a
sample). The ingest stage then does what it always did: validate each record, grade it with our
graders, store it all or nothing; so an error is `FILE:UNIT N: field 'X': what is wrong`, `--skip-bad`
skips, and re-ingesting adds nothing, whatever the source.

A source is one registered module in this package (or a plugin): a `TraceSource` (the reader) and its
`SourceInfo`,

    register("format", "inspect", read_inspect, meta=SourceInfo(unit="sample", sniff=..., extra="inspect",
             module="inspect_ai", description=...))

where `read(path, options)` yields `(unit number, record | IngestError)` and raises a file-level
`IngestError` (`trace_records.file_error`) for an input it cannot read at all. `sniff(path)` answers,
cheaply (a name, the first bytes), whether a file looks like this source's; `--from auto` takes the first
source that says yes (by `order`), Legi-Val's own format last. A source whose library is an optional
extra names it: `legival list formats`, and a missing one is one `error:` line with the install command.
Callers reach a source's reader only through `source_reader` / `read_source`, typed as `TraceSource`.
"""

from __future__ import annotations

import fnmatch
import importlib.util
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

from legival_core.readers.trace_records import IngestError, file_error
from legival_core.registry import UnknownName, canonical_name, entries, entry

Record = tuple[int, dict[str, Any] | IngestError]
"""(unit number, a record of our schema or the error of that unit)."""

AUTO = "auto"
OWN = "legival"
"""Legi-Val's own JSONL/Parquet trace files (docs/CLI.md)."""


@dataclass(frozen=True, slots=True)
class SourceOptions:
    """What the user says about an input besides its path (`legival ingest --from ... --dataset ...`, a
    spec's `traces:` entry). `mapping`: (our field, the source's column) pairs (`--map reasoning=response`);
    `requests`: an OpenAI batch input file; `problems`: a problems file in a dataset's own format."""

    dataset: str | None = None
    mapping: tuple[tuple[str, str], ...] = ()
    requests: Path | None = None
    problems: Path | None = None
    teacher: str | None = None
    """The teacher's name over the source's model name (the spec's teacher, `--teacher`)."""

    def column(self, ours: str, default: str) -> str:
        """The source's column for our field `ours` (the mapping's, else `default`)."""
        return dict(self.mapping).get(ours, default)


@dataclass(frozen=True, slots=True)
class SourceInfo:
    """Registry metadata of a source (module docstring)."""

    unit: str | Callable[[Path], str]
    """What one record of it is, as errors name it: "line", "row", "sample" (or that, for a path)."""
    sniff: Callable[[Path], bool]
    description: str
    extra: str | None = None
    """The optional-dependency group its library comes in (`pip install 'legival[EXTRA]'`); None: base."""
    module: str | None = None
    """The library's import name, checked before reading (a missing extra is one clear error)."""
    order: int = 100
    options: tuple[str, ...] = field(default_factory=tuple)
    """The `SourceOptions` fields it reads (others given to it are refused, not ignored)."""
    present: Callable[[Path], bool] | None = None
    """Whether an input it reads is there (default: a file): a directory, `DIR:SPLIT`... (the spec's check)."""
    key: tuple[str, ...] = ()
    """The record fields that name one unit of an input (an OpenAI request's `custom_id` and `choice`, an
    Inspect sample's `sample_id` and `epoch`): two records of one input with the same key and different
    traces are a conflict, as a problem redefined is (`stages.ingest.find_conflicts`); the same trace
    twice is a counted duplicate."""


class TraceSource(Protocol):
    """The reader a source registers (`register("format", NAME, read, meta=SourceInfo(...))`): the
    records of one input, streamed, each `(unit number, record | IngestError)`, and a file-level
    `IngestError` (`trace_records.file_error`) for an input it cannot read at all. `options` holds the
    teacher's name when one is given, and only the options its `SourceInfo.options` names
    (`read_source` refuses the others)."""

    def __call__(self, path: Path, options: SourceOptions, /) -> Iterator[Record]: ...


MAP_FIELDS = ("teacher", "dataset", "problem_id", "problem", "gold_answer", "reasoning", "response", "correct",
              "truncated", "choices")
"""Our trace fields a `--map` may name (`readers.trace_records.TraceRecord`)."""


def parse_mapping(text: str | None) -> tuple[tuple[str, str], ...]:
    """`reasoning=response,problem=question` as ((ours, theirs), ...); ValueError saying what to fix."""
    if not text:
        return ()
    pairs: list[tuple[str, str]] = []
    for part in text.split(","):
        ours, sep, theirs = (x.strip() for x in part.partition("="))
        if not sep or not ours or not theirs:
            raise ValueError(f"--map: {part.strip()!r} is not FIELD=COLUMN (e.g. reasoning=response,problem=question)")
        if ours not in MAP_FIELDS:
            raise ValueError(f"--map: {ours!r} is not a trace field (the fields: {', '.join(MAP_FIELDS)})")
        if ours in dict(pairs):
            raise ValueError(f"--map: {ours!r} is mapped twice")
        pairs.append((ours, theirs))
    return tuple(pairs)


class MissingExtra(IngestError):
    """A source's library is not installed: the file, and the exact install command."""


def input_present(path: Path, fmt: str = AUTO) -> bool:
    """An input `fmt` can read is at `path` (`auto`: a file, or what any source reads, e.g. a dataset
    directory); the spec checks its teachers' `traces:` with it."""
    if path.is_file():
        return True
    names = source_names() if fmt == AUTO else [canonical_name("format", fmt)]
    return any((p := source_info(n).present) is not None and p(path) for n in names)


def source_names() -> list[str]:
    """Every registered source, in sniffing order (Legi-Val's own last)."""
    return [e.name for e in sorted(entries("format"), key=lambda e: (e.meta.order, e.name))]


def source_info(name: str) -> SourceInfo:
    info: SourceInfo = entry("format", name).meta
    return info


def source_reader(name: str) -> TraceSource:
    """The reader the source `name` registered (its library not checked: `read_source` does that)."""
    reader: TraceSource = entry("format", name).obj
    return reader


def choose(path: Path, fmt: str = AUTO) -> str:
    """The source to read `path` with: `fmt` itself (checked against the registry: an IngestError
    naming the file and the formats there are), or, for `auto`, the first whose `sniff` says yes."""
    if fmt != AUTO:
        try:
            return canonical_name("format", fmt)
        except UnknownName:
            raise file_error(str(path), f"unknown format {fmt!r} (--from): the formats are {AUTO}, "
                                        f"{', '.join(source_names())} (`legival list formats`)") from None
    if path.exists() and not (path.is_file() or path.is_dir()):
        return OWN  # a pipe (`<(zcat ...)`, a FIFO) can be read once: no sniffing, our reader replays its start
    # a path that is not there may still name something a source reads (hf's `DIR:SPLIT`): sniff it
    for name in source_names():
        if name != OWN and source_info(name).sniff(path):
            return name
    return OWN


def unit_key(rec: dict[str, Any], key: tuple[str, ...]) -> tuple[str, str] | None:
    """(the first key field, the unit as its fields say it: `custom_id 'r-1', choice 1`) of a record by
    its source's `SourceInfo.key`; None when the record does not carry the first one."""
    if not key or rec.get(key[0]) is None:
        return None
    return key[0], ", ".join(f"{k} {rec[k]!r}" for k in key if rec.get(k) is not None)


def read_source(path: Path, fmt: str = AUTO, options: SourceOptions | None = None) -> tuple[str, str, Iterator[Record]]:
    """(the source chosen, its unit, its records) for `path` (module docstring). Options the source does
    not read are refused (`--requests` given to an Inspect log is a mistake, not a no-op)."""
    opts = options or SourceOptions()
    name = choose(path, fmt)
    info = source_info(name)
    given = [f for f in ("dataset", "mapping", "requests", "problems") if getattr(opts, f)]
    unused = [f for f in given if f not in info.options]
    if unused:
        flags = ", ".join("--map" if f == "mapping" else f"--{f}" for f in unused)
        raise file_error(str(path), f"read as {name} ({info.description}), which takes no {flags}")
    if info.module is not None and importlib.util.find_spec(info.module) is None:
        raise MissingExtra(str(path), 0, "<file>", f"reading {name} files needs the {info.module} library, "
                           f"which is not installed: pip install 'legival[{info.extra}]' "
                           f"(in this checkout: .venv/bin/pip install -e '.[{info.extra}]')", "file")
    reader = source_reader(name)
    unit = info.unit(path) if callable(info.unit) else info.unit
    return name, unit, reader(path, opts)


def dataset_of_task(task: str, override: str | None, where: str, unit_no: int, unit: str,
                    field_name: str = "task") -> str | IngestError:
    """The registered dataset an evaluation task is about: `override` (`--dataset`) if given, else the
    dataset whose name, alias or `task_patterns` (the dataset module's own list) match `task`; an
    IngestError naming the task and the option to give otherwise."""
    if override:
        try:
            return canonical_name("dataset", override)
        except UnknownName as e:
            return IngestError(where, unit_no, "--dataset", str(e), unit)
    name = task.strip().lower()
    try:
        return canonical_name("dataset", name)
    except UnknownName:
        pass
    for ds in entries("dataset"):
        if any(fnmatch.fnmatchcase(name, pat) for pat in getattr(ds.obj, "task_patterns", ())):
            return ds.name
    known = ", ".join(sorted(ds.name for ds in entries("dataset")))
    return IngestError(where, unit_no, field_name, f"task {task!r} maps to no registered dataset ({known}): "
                                                  "give --dataset NAME (or `dataset:` in the spec's traces entry)",
                       unit)
