"""Legi-Val's own trace files: JSONL (plain, gzip or zstd) or Parquet, one record per line or row in
our schema (docs/CLI.md, `readers.trace_records.TraceRecord`). The format every other source is read
into; `--from auto` falls back to it."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

from legival_core.readers.sources import OWN, Record, SourceInfo, SourceOptions
from legival_core.readers.trace_records import IngestError, is_parquet, open_trace_file, read_records
from legival_core.registry import register


def read_own(path: Path, _options: SourceOptions) -> Iterator[Record]:
    yield from read_records(open_trace_file(path))


def _never(_path: Path) -> bool:
    return False  # the fallback of `auto`, never sniffed


def _unit(path: Path) -> str:
    """A row of a Parquet file (told by its content, as the reader tells it), else a line."""
    if not is_parquet(path):
        return "line"
    try:
        with open_trace_file(path) as src:
            return "row" if src.format.kind == "parquet" else "line"
    except IngestError:  # the reader says what is wrong with it
        return "row"


register("format", OWN, read_own, aliases=("jsonl", "parquet", "own"),
         description="Legi-Val's own trace records: JSONL (plain, .gz, .zst) or Parquet",
         meta=SourceInfo(unit=_unit, sniff=_never, description="Legi-Val's own trace records", order=1000))
