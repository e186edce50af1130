"""Hugging Face datasets as a trace source (`legival ingest --from hf`, docs/sources.md).

Traces published or kept as a `datasets` dataset are read through the `datasets` library itself (the
`hf` extra), never by parsing its Arrow files by hand:

- a directory written by `Dataset.save_to_disk` (memory-mapped by `load_from_disk`: a 2 GB dataset is
  never held whole), or by `DatasetDict.save_to_disk`, whose split is chosen as `DIR:SPLIT` (a dict of
  one split needs none; otherwise the error names the splits there are);
- data files: `.parquet`, `.json`/`.jsonl`, `.csv` (streamed through `load_dataset(<builder>,
  data_files=..., streaming=True)`: no copy into the datasets cache), a `.arrow` file (`Dataset.from_file`,
  memory-mapped), or a directory of such files (`load_dataset(DIR)`, its splits inferred as the hub does);
- a hub dataset name, `NAME[:CONFIG][:SPLIT]`, where the path does not exist locally (`load_dataset(NAME,
  streaming=True)`; `HF_DATASETS_OFFLINE=1` is respected: offline, an uncached name is one error line).

Columns are found by their usual names (`DEFAULT_COLUMNS`) unless `--map ours=theirs` names them; a
mapped column that does not exist is an error listing the columns that do. The teacher is `--teacher`
or a model column, the dataset `--dataset` or a dataset column (matched through each dataset's
`task_patterns`), the problem id a column or else the row's index in the split (0-based, as `ds[i]`).
Errors count rows from 1 (row 1 is `ds[0]`), as for Legi-Val's own Parquet files.

`--from auto` takes a directory holding `dataset_info.json`, `state.json` or `dataset_dict.json`, an
`.arrow` file, and a `.parquet` file that `datasets` wrote (its `huggingface` schema metadata) only when
its columns cannot be a Legi-Val trace file's (then it is ours, read by our own reader). JSON, JSONL and
CSV files are never taken by `auto`: they are everyone's format; say `--from hf`.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, TypeVar

from legival_core.readers.input_files import regular_file_error
from legival_core.readers.sources import Record, SourceInfo, SourceOptions, dataset_of_task
from legival_core.readers.trace_records import IngestError, file_error
from legival_core.registry import register

FORMAT = "hf"
MARKERS = ("dataset_info.json", "state.json", "dataset_dict.json")
"""The files `save_to_disk` writes next to the Arrow data (a Dataset: the first two; a DatasetDict: the last)."""

BUILDERS = {".parquet": "parquet", ".pq": "parquet", ".json": "json", ".jsonl": "json", ".ndjson": "json",
            ".csv": "csv", ".arrow": "arrow"}
"""Data-file suffixes and the `datasets` builder that reads them (a compression suffix after them is
read by `datasets` itself)."""
COMPRESSIONS = (".gz", ".zst", ".bz2", ".xz")

DEFAULT_COLUMNS: dict[str, tuple[str, ...]] = {
    "problem": ("problem", "question", "prompt"),
    "reasoning": ("reasoning", "reasoning_content", "thinking"),
    "response": ("response", "output", "completion"),
    "gold_answer": ("gold_answer", "gold", "answer", "solution"),
    "teacher": ("model", "teacher"),
    "dataset": ("dataset",),
    "problem_id": ("problem_id", "question_id", "id"),
    "correct": ("correct", "is_correct"),
    "truncated": ("truncated",),
    "choices": ("choices",),
}
"""Our trace field -> the source columns tried for it, in order, when `--map` does not name one."""

BATCH_ROWS = 1024
T = TypeVar("T")
_HUB_NAME = re.compile(r"^[A-Za-z0-9][\w.-]*(/[\w.-]+)?$")


def sniff(path: Path) -> bool:
    """A `save_to_disk` directory, an `.arrow` file, or a `.parquet` file written by `datasets` whose
    columns are not a Legi-Val trace file's (module docstring). Reads marker names, or a Parquet footer."""
    local, _split = _local_and_split(path)
    if local is None:
        return False
    if local.is_dir():
        return any((local / m).is_file() for m in MARKERS)
    name = local.name.lower()
    if name.endswith(".arrow"):
        return True
    return name.endswith((".parquet", ".pq")) and _hf_parquet_not_ours(local)


def _hf_parquet_not_ours(path: Path) -> bool:
    """Written by `datasets` (the footer holds its `huggingface` metadata key: checked on raw bytes,
    no import) and lacking a column our own records need."""
    try:
        with path.open("rb") as f:
            f.seek(0, 2)
            size = f.tell()
            if size < 12:
                return False
            f.seek(size - 8)
            tail = f.read(8)
            footer_len = int.from_bytes(tail[:4], "little")
            if tail[4:] != b"PAR1" or footer_len > min(size - 12, 64 << 20):
                return False
            f.seek(size - 8 - footer_len)
            if b"huggingface" not in f.read(footer_len):
                return False
        import pyarrow.parquet as pq

        names = set(pq.read_schema(path).names)
    except (OSError, ValueError):
        return False
    ours = ({"model", "teacher"}, {"dataset"}, {"problem_id"}, {"problem", "question"}, {"gold_answer", "gold"},
            {"reasoning", "response", "output", "raw_output"})
    return not all(names & need for need in ours)


def _local_and_split(path: Path) -> tuple[Path | None, str | None]:
    """(the local file or directory, the split named after a colon), or (None, None) when neither
    `path` nor the part before its last colon exists here (a hub name, or a missing file)."""
    if path.exists():
        return path, None
    head, sep, split = str(path).rpartition(":")
    if sep and head and split and "/" not in split and Path(head).exists():
        return Path(head), split
    return None, None


# ------------------------------------------------------------------------------------------ reading


def read_hf(path: Path, options: SourceOptions) -> Iterator[Record]:
    """(row number from 1, record or its error) for each row of the chosen split (module docstring)."""
    import datasets

    datasets.disable_progress_bars()
    datasets.logging.set_verbosity(datasets.logging.CRITICAL)  # its errors become ours: one line
    name = str(path)
    ds = _open(path, name)
    fixed_dataset = _checked_dataset(options, name)
    known = ds.column_names  # None for a streamed JSON/CSV file: its first rows tell
    if known is not None:
        cols = _needed(list(known), options, name, fixed_dataset)
        ds = _library(name, lambda: ds.select_columns(list(dict.fromkeys(cols.values()))))  # others never decoded
    batches = _library(name, lambda: ds.iter(batch_size=BATCH_ROWS))
    batch: dict[str, list[Any]] | None = _library(name, lambda: next(batches, None))
    if batch is None:
        return
    if known is None:
        cols = _needed(list(batch), options, name, fixed_dataset)
    rows = _Rows(name, cols, options.teacher, fixed_dataset)
    columns = list(dict.fromkeys(cols.values()))
    index = 0
    while batch is not None:
        for values in zip(*(batch[c] for c in columns), strict=True):
            yield index + 1, rows.record(index, dict(zip(columns, values, strict=True)))
            index += 1
        batch = _library(name, lambda: next(batches, None))


def _library(name: str, call: Callable[[], T]) -> T:
    """`call()`, a call into `datasets`: whatever it raises for an unreadable file (OSError, ValueError,
    pyarrow's errors...) is one file error; only calls into the library are wrapped, not our code."""
    try:
        return call()
    except Exception as e:
        raise file_error(name, f"datasets cannot read it: {_first_line(e)}") from None


def _needed(columns: list[str], options: SourceOptions, name: str, fixed_dataset: str | None) -> dict[str, str]:
    """`resolve_columns`, and the teacher and dataset each from an option or a column."""
    cols = resolve_columns(columns, options, name)
    if fixed_dataset is None and "dataset" not in cols:
        raise file_error(name, f"no dataset column (looked for {_tried('dataset')}): give --dataset NAME "
                               "or --map dataset=COLUMN")
    if options.teacher is None and "teacher" not in cols:
        raise file_error(name, f"no model column (looked for {_tried('teacher')}): give --teacher NAME "
                               "or --map teacher=COLUMN")
    if options.teacher is not None:
        cols.pop("teacher", None)
    if fixed_dataset is not None:
        cols.pop("dataset", None)
    return cols


def _open(path: Path, name: str) -> Any:
    """The `datasets` Dataset or IterableDataset of one split of `path` (module docstring)."""
    import datasets

    local, split = _local_and_split(path)
    special = None if local is None else regular_file_error(local, "datasets reads a data file by its path, and "
                                                                     "more than once")
    if special is not None:
        raise file_error(special.file, special.message)
    try:
        if local is None:
            return _hub(str(path), name)
        if local.is_dir():
            if (local / "dataset_dict.json").is_file():
                return _split_of(datasets.load_from_disk(str(local)), split, name)
            if any((local / m).is_file() for m in MARKERS):
                ds = datasets.load_from_disk(str(local))
                if split is not None and split != str(ds.split):
                    held = "no split name" if ds.split is None else f"split {ds.split}"
                    raise file_error(name, f"{local} holds one Dataset ({held}), not a DatasetDict: "
                                           f"give it without ':{split}'")
                return ds
            return _split_of(datasets.load_dataset(str(local), streaming=True), split, name)
        builder = _builder(local)
        if builder is None:
            raise file_error(name, "is not a file datasets reads here (a save_to_disk directory, or "
                                   f"{', '.join(sorted(BUILDERS))} data files, or a hub name)")
        if split is not None:
            raise file_error(name, f"a data file holds one split: give {local} without ':{split}'")
        if builder == "arrow":
            return datasets.Dataset.from_file(str(local))
        return datasets.load_dataset(builder, data_files=str(local), split="train", streaming=True)
    except IngestError:
        raise
    except Exception as e:  # FileNotFoundError, ValueError, ConnectionError, pyarrow's errors...
        raise file_error(name, f"datasets cannot load it: {_first_line(e)}") from None


def _hub(text: str, name: str) -> Any:
    """A hub dataset `NAME[:CONFIG][:SPLIT]` (`load_dataset`, streamed)."""
    import datasets

    repo, *rest = text.split(":")
    if not _HUB_NAME.match(repo) or len(rest) > 2 or _builder(Path(repo)) is not None or text.startswith((".", "/")):
        raise file_error(name, "no such file or directory (nor a hub dataset name: NAME[:CONFIG][:SPLIT])")
    config = rest[0] if len(rest) == 2 else None
    split = rest[-1] if rest else None
    offline = datasets.config.HF_HUB_OFFLINE
    hint = " (no such local path, and HF_DATASETS_OFFLINE/HF_HUB_OFFLINE is set)" if offline else ""
    try:
        loaded = datasets.load_dataset(repo, config, streaming=True)
    except Exception as e:  # offline, unknown name, a config to choose...: datasets says which
        raise file_error(name, f"cannot load the hub dataset {repo!r}{hint}: {_first_line(e)}") from None
    return _split_of(loaded, split, name)


def _split_of(loaded: Any, split: str | None, name: str) -> Any:
    """One split of a DatasetDict (or IterableDatasetDict): the one named, or the only one."""
    splits = list(loaded)
    if split is None:
        if len(splits) == 1:
            return loaded[splits[0]]
        raise file_error(name, f"holds the splits {', '.join(splits)}: choose one as {name}:SPLIT")
    if split not in splits:
        raise file_error(name, f"has no split {split!r} (its splits: {', '.join(splits)})")
    return loaded[split]


def _builder(path: Path) -> str | None:
    name = path.name.lower()
    for c in COMPRESSIONS:
        name = name.removesuffix(c)
    return BUILDERS.get(Path(name).suffix)


def _checked_dataset(options: SourceOptions, name: str) -> str | None:
    if options.dataset is None:
        return None
    got = dataset_of_task(options.dataset, options.dataset, name, 0, "file")
    if isinstance(got, IngestError):
        raise file_error(name, f"--dataset: {got.message}")
    return got


def resolve_columns(columns: list[str], options: SourceOptions, name: str) -> dict[str, str]:
    """Our field -> the source column it is read from: `--map` first (a column that is not there is an
    error naming those that are), then the first of `DEFAULT_COLUMNS` not taken by a mapping."""
    have = set(columns)
    shown = ", ".join(columns) or "none"
    cols: dict[str, str] = {}
    for ours, theirs in options.mapping:
        if theirs not in have:
            raise file_error(name, f"--map {ours}={theirs}: no column {theirs!r} (the columns: {shown})")
        cols[ours] = theirs
    taken = set(cols.values())
    for ours, tried in DEFAULT_COLUMNS.items():
        if ours not in cols:
            found = next((c for c in tried if c in have and c not in taken), None)
            if found is not None:
                cols[ours] = found
                taken.add(found)
    for ours in ("problem", "gold_answer"):
        if ours not in cols:
            raise file_error(name, f"no column for {ours} (looked for {_tried(ours)}; the columns: {shown}): "
                                   f"give --map {ours}=COLUMN")
    if "reasoning" not in cols and "response" not in cols:
        raise file_error(name, f"no column for reasoning (looked for {_tried('reasoning')}, or a raw output in "
                               f"{_tried('response')}; the columns: {shown}): give --map reasoning=COLUMN")
    return cols


def _tried(ours: str) -> str:
    return ", ".join(DEFAULT_COLUMNS[ours])


def _first_line(e: BaseException) -> str:
    text = str(e).strip() or type(e).__name__
    return text.splitlines()[0][:400]


class _Rows:
    """One row as a record of our schema; a value of the wrong type is an IngestError naming the
    source's column (what the user sees in their dataset), with our field in the message."""

    def __init__(self, file: str, cols: dict[str, str], teacher: str | None, dataset: str | None) -> None:
        self.file, self.cols, self.teacher, self.dataset = file, cols, teacher, dataset
        self._datasets: dict[str, str] = {}

    def record(self, index: int, row: dict[str, Any]) -> dict[str, Any] | IngestError:
        row_no = index + 1
        rec: dict[str, Any] = {}
        try:
            for ours, col in self.cols.items():
                value = row[col]
                if ours in ("problem", "reasoning", "response", "teacher", "dataset"):
                    if value is not None and not isinstance(value, str):
                        raise self._error(row_no, col, ours, f"expected text, got {_kind(value)}")
                elif ours in ("gold_answer", "problem_id"):
                    if isinstance(value, bool) or not isinstance(value, str | int | float | None):
                        raise self._error(row_no, col, ours, f"expected text or a number, got {_kind(value)}")
                    value = None if value is None else str(value)
                elif ours in ("correct", "truncated"):
                    if isinstance(value, int) and not isinstance(value, bool) and value in (0, 1):
                        value = bool(value)  # a 0/1 column
                    if value is not None and not isinstance(value, bool):
                        raise self._error(row_no, col, ours, f"expected true/false (or 0/1), got {_kind(value)}")
                elif ours == "choices" and value is not None and (
                        not isinstance(value, list) or not all(isinstance(c, str) for c in value)):
                    raise self._error(row_no, col, ours, f"expected a list of texts, got {_kind(value)}")
                if value is not None:
                    rec[ours] = value
            for ours in ("problem", "gold_answer", "problem_id"):
                if ours in self.cols and ours not in rec:
                    raise self._error(row_no, self.cols[ours], ours, "is empty (null)")
            if "reasoning" not in rec and "response" not in rec:
                col = self.cols.get("reasoning") or self.cols["response"]
                both = "reasoning" in self.cols and "response" in self.cols
                raise self._error(row_no, col, "reasoning" if "reasoning" in self.cols else "response",
                                  "is empty (null)", f", and so is {self.cols['response']!r} (a raw output)" if both else "")
            if self.teacher is not None:
                rec["teacher"] = self.teacher
            elif "teacher" not in rec:
                raise self._error(row_no, self.cols["teacher"], "model", "is empty (null): give --teacher NAME")
            rec["dataset"] = self.dataset or self._dataset_of(row_no, rec.get("dataset"))
        except IngestError as e:
            return e
        rec.setdefault("problem_id", str(index))
        return rec

    def _dataset_of(self, row_no: int, value: str | None) -> str:
        col = self.cols["dataset"]
        if value is None:
            raise self._error(row_no, col, "dataset", "is empty (null): give --dataset NAME")
        if value not in self._datasets:
            got = dataset_of_task(value, None, self.file, row_no, "row", col)
            if isinstance(got, IngestError):
                raise got
            self._datasets[value] = got
        return self._datasets[value]

    def _error(self, row_no: int, col: str, ours: str, message: str, tail: str = "") -> IngestError:
        what = f" (the trace's {ours})" if col != ours else ""
        return IngestError(self.file, row_no, col, f"{message}{what}{tail}", "row")


def _kind(value: Any) -> str:
    if isinstance(value, dict | list):
        return f"{type(value).__name__} {json.dumps(value, default=str)[:60]}"
    return f"{type(value).__name__} {str(value)[:60]!r}"


register("format", FORMAT, read_hf, aliases=("datasets", "huggingface"),
         description="Hugging Face datasets: a save_to_disk directory (DIR[:SPLIT]), data files, or a hub name",
         meta=SourceInfo(unit="row", sniff=sniff, extra="hf", module="datasets", options=("dataset", "mapping"),
                         order=60, present=lambda p: _local_and_split(p)[0] is not None,
                         description="a Hugging Face dataset (save_to_disk directory, parquet/json/csv/arrow "
                                     "files, hub name)"))
