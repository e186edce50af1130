"""Agreement between human backtracking annotations and the judge (Legi-Val appendix A.3.4).

Inputs are per-trace backtracking COUNTS (number of distinct flagged steps). Reported:
- per dataset: Spearman rho of each annotator vs the judge and of each annotator pair;
  Cohen's kappa on the exact counts (each count a category) and on the binary label
  (count > 0 = backtracking detected), for the same pairs;
- across datasets: Kendall tau-b between the judge and the mean human count, with all traces of all
  datasets pooled (our reading of "Kendall tau across datasets"), and per annotator.
A statistic is None when undefined (fewer than 2 shared traces, a constant series, or kappa with
chance agreement 1). Traces the judge has no count for (failed/overflow) are left out and counted.
"""

from __future__ import annotations

import csv
import itertools
import math
from collections import Counter, defaultdict
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from legival_core import untrusted_json
from legival_core.readers.input_files import COMPRESSED_SUFFIXES, InputFileError, read_lines, sniff, supported
from legival_core.readers.records import LineProblem, read_jsonl_records

JUDGE = "judge"


@dataclass(frozen=True, slots=True)
class HumanAnnotation:
    trace_id: str
    annotator: str
    count: int
    steps: tuple[int, ...] | None = None


def _parse_steps(v: Any) -> tuple[int, ...] | None:
    if v is None:
        return None
    if isinstance(v, list):
        return tuple(sorted({int(x) for x in v}))
    s = str(v).strip()
    if s.startswith("["):
        return _parse_steps(untrusted_json.loads(s))
    return tuple(sorted({int(x) for x in s.replace(",", ";").split(";") if x.strip()}))


def _row_to_annotation(row: Mapping[str, Any], where: str) -> HumanAnnotation:
    tid = str(row.get("trace_id") or "").strip()
    ann = str(row.get("annotator") or "").strip()
    if not tid or not ann:
        raise ValueError(f"{where}: trace_id and annotator are required")
    raw_steps = row.get("steps")
    raw_count = row.get("count")
    # An empty `steps` cell means "no steps flagged" unless a count is given (CSV rows have every column).
    blank_steps = isinstance(raw_steps, str) and not raw_steps.strip()
    count_given = raw_count not in (None, "")
    try:
        steps = None if raw_steps is None or (blank_steps and count_given) else _parse_steps(raw_steps)
    except (ValueError, TypeError, OverflowError, RecursionError):
        raise ValueError(f"{where}: field 'steps': expected step numbers (a list or '3;7'), got "
                         f"{_shown(raw_steps)}") from None
    count: int | None = None
    if raw_count not in (None, ""):
        try:
            count = int(float(str(raw_count)))
        except (ValueError, OverflowError):
            raise ValueError(f"{where}: field 'count': expected a whole number, got {_shown(raw_count)}") from None
        if count < 0:
            raise ValueError(f"{where}: count must be >= 0, got {count}")
    if steps is None and count is None:
        raise ValueError(f"{where}: give either steps (list or '3;7') or count")
    if steps is not None:
        if count is not None and count != len(steps):
            raise ValueError(f"{where}: count={count} disagrees with {len(steps)} distinct steps")
        count = len(steps)
    assert count is not None
    return HumanAnnotation(tid, ann, count, steps)


def _shown(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."


_FORMATS = {".csv": "csv", ".jsonl": "jsonl", ".ndjson": "jsonl"}


def _format_of(p: Path) -> str:
    """CSV or JSONL, by the name with its compression suffix dropped (`h.jsonl.gz` is JSONL; what
    compresses it is told by its first bytes when it is read). A name that says neither: what the
    file is when its first bytes tell (`h.zip`: a zip archive), else that CSV or JSONL is read."""
    name = Path(p.stem) if p.suffix.lower() in COMPRESSED_SUFFIXES else p
    fmt = _FORMATS.get(name.suffix.lower())
    if fmt is None:
        try:
            sniff(p)
        except InputFileError as e:
            raise _what_is_read(e) from None
        raise ValueError(f"{p}: expected a .csv or .jsonl file (plain, or compressed with gzip or zstd: "
                         ".csv.gz, .jsonl.zst)")
    return fmt


def _csv_lines(p: Path) -> Iterator[str]:
    """The text lines of a CSV file, plain or gzip/zstd-compressed (`input_files`), each with its
    newline (a quoted cell may span lines); another container is refused saying what it is."""
    try:
        for line, raw in read_lines(p):
            try:
                yield raw.decode("utf-8") + "\n"
            except UnicodeDecodeError as e:
                raise ValueError(f"{p}:{line}: invalid UTF-8 byte 0x{raw[e.start]:02x} at column "
                                 f"{e.start + 1}") from None
    except InputFileError as e:
        raise _what_is_read(e) from None


def _what_is_read(e: InputFileError) -> InputFileError:
    """The opener's error, ending with what this reader reads (CSV too, not only JSONL)."""
    return InputFileError(e.file, e.message.replace(supported(False), "this command reads CSV or JSONL, plain or "
                                                                      "compressed with gzip or zstd"))


def _rows(p: Path) -> Iterator[tuple[str, Mapping[str, Any]]]:
    """(FILE:LINE, row) of every annotation row of a CSV or JSONL file."""
    if _format_of(p) == "csv":
        reader = csv.DictReader(_csv_lines(p))
        try:
            for csv_row in reader:
                yield f"{p}:{reader.line_num}", csv_row
        except csv.Error as e:
            raise ValueError(f"{p}:{reader.line_num}: not a readable CSV row ({e})") from None
        return
    try:
        for line, rec in read_jsonl_records(p):
            if isinstance(rec, LineProblem):
                raise ValueError(f"{p}:{line}: field '{rec.field}': {rec.message}")
            yield f"{p}:{line}", rec
    except InputFileError as e:
        raise _what_is_read(e) from None


def load_human_annotations(path: str | Path) -> list[HumanAnnotation]:
    """Read a CSV or JSONL file (plain, or gzip/zstd-compressed) with trace_id, annotator, and either
    `steps` or `count`. Every error is a ValueError naming the file (and the line); a file with no
    annotation is one too: agreement over nothing is not a result."""
    p = Path(path)
    out: list[HumanAnnotation] = []
    seen: set[tuple[str, str]] = set()
    for where, row in _rows(p):
        a = _row_to_annotation(row, where)
        if (a.trace_id, a.annotator) in seen:
            raise ValueError(f"{where}: duplicate annotation of {a.trace_id} by {a.annotator}")
        seen.add((a.trace_id, a.annotator))
        out.append(a)
    if not out:
        held = "only a header or nothing" if _format_of(p) == "csv" else "only blank lines or nothing"
        raise ValueError(f"{p}: no annotations (the file holds {held}): there is nothing to compare")
    return out


def cohen_kappa(a: Sequence[Any], b: Sequence[Any]) -> float | None:
    """Cohen's kappa = (p_o - p_e) / (1 - p_e), each distinct value a category; None if p_e == 1."""
    if len(a) != len(b):
        raise ValueError("kappa needs two sequences of equal length")
    n = len(a)
    if n == 0:
        return None
    po = sum(x == y for x, y in zip(a, b, strict=True)) / n
    ca, cb = Counter(a), Counter(b)
    pe = sum(ca[k] * cb[k] for k in ca.keys() | cb.keys()) / (n * n)
    if pe >= 1.0:
        return None
    return (po - pe) / (1.0 - pe)


def _finite(x: Any) -> float | None:
    v = float(x)
    return None if math.isnan(v) else v


def spearman(a: Sequence[float], b: Sequence[float]) -> float | None:
    from scipy.stats import spearmanr

    if len(a) < 2 or len(set(a)) < 2 or len(set(b)) < 2:
        return None
    return _finite(spearmanr(a, b).statistic)


def kendall(a: Sequence[float], b: Sequence[float]) -> float | None:
    from scipy.stats import kendalltau

    if len(a) < 2 or len(set(a)) < 2 or len(set(b)) < 2:
        return None
    return _finite(kendalltau(a, b).statistic)


@dataclass(frozen=True, slots=True)
class PairStats:
    """Agreement of rater `a` with rater `b` ("judge" for the LLM judge) over `n` shared traces."""

    a: str
    b: str
    n: int
    spearman: float | None
    kappa_counts: float | None
    kappa_binary: float | None


@dataclass(frozen=True, slots=True)
class DatasetAgreement:
    dataset: str
    n_traces: int
    human_vs_judge: tuple[PairStats, ...]
    human_vs_human: tuple[PairStats, ...]


@dataclass(frozen=True, slots=True)
class AgreementReport:
    per_dataset: tuple[DatasetAgreement, ...]
    kendall_tau_mean_human_vs_judge: float | None
    kendall_tau_per_annotator: tuple[tuple[str, float | None], ...]
    n_traces: int
    skipped_no_judge: int
    skipped_no_dataset: int


def _pair(
    a_name: str, b_name: str, a: Mapping[str, int], b: Mapping[str, int], ids: Sequence[str]
) -> PairStats:
    shared = [t for t in ids if t in a and t in b]
    xa = [a[t] for t in shared]
    xb = [b[t] for t in shared]
    return PairStats(
        a_name,
        b_name,
        len(shared),
        spearman(xa, xb),
        cohen_kappa(xa, xb),
        cohen_kappa([x > 0 for x in xa], [x > 0 for x in xb]),
    )


def agreement(
    human: Sequence[HumanAnnotation],
    judge_counts: Mapping[str, int],
    datasets: Mapping[str, str],
) -> AgreementReport:
    """Per-dataset and pooled agreement; `judge_counts` maps trace_id -> judge's count of flagged steps."""
    by_annotator: dict[str, dict[str, int]] = defaultdict(dict)
    no_judge: set[str] = set()
    no_dataset: set[str] = set()
    for h in human:
        if h.trace_id not in datasets:
            no_dataset.add(h.trace_id)
            continue
        if h.trace_id not in judge_counts:
            no_judge.add(h.trace_id)
            continue
        by_annotator[h.annotator][h.trace_id] = h.count
    annotators = sorted(by_annotator)
    ids_by_ds: dict[str, list[str]] = defaultdict(list)
    for tid in sorted({t for d in by_annotator.values() for t in d}):
        ids_by_ds[datasets[tid]].append(tid)
    per_ds = []
    for ds in sorted(ids_by_ds):
        ids = ids_by_ds[ds]
        hj = tuple(_pair(a, JUDGE, by_annotator[a], judge_counts, ids) for a in annotators)
        hh = tuple(
            _pair(a, b, by_annotator[a], by_annotator[b], ids)
            for a, b in itertools.combinations(annotators, 2)
        )
        per_ds.append(DatasetAgreement(ds, len(ids), hj, hh))
    all_ids = [t for ds in sorted(ids_by_ds) for t in ids_by_ds[ds]]
    mean_h = []
    for t in all_ids:
        counts = [by_annotator[a][t] for a in annotators if t in by_annotator[a]]
        mean_h.append(sum(counts) / len(counts))
    tau_mean = kendall(mean_h, [judge_counts[t] for t in all_ids])
    per_ann = []
    for a in annotators:
        ids = [t for t in all_ids if t in by_annotator[a]]
        per_ann.append((a, kendall([by_annotator[a][t] for t in ids], [judge_counts[t] for t in ids])))
    return AgreementReport(
        tuple(per_ds), tau_mean, tuple(per_ann), len(all_ids), len(no_judge - set(all_ids)), len(no_dataset)
    )
