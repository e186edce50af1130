"""Agreement between human backtracking annotations and the judge (Legi-Val appendix A.3.4).

Inputs are per-trace backtracking COUNTS (number of distinct flagged steps), and the flagged steps
themselves where an annotator gave them. Reported (the statistics: `legival_core.agreement`):
- per dataset: Spearman rho of each annotator vs the judge and of each annotator pair;
  Cohen's kappa on the exact counts (each count a category) and on the binary label
  (count > 0 = backtracking detected), for the same pairs; beside them (issue 48) raw agreement,
  Cohen's kappa, Gwet's AC1, prevalences and the saturation flag of the binary label (`flag`), of the
  counts binned on the ordinal scale `COUNT_BINS` = 0, 1, 2, 3 or more (`binned`: quadratic-weighted
  kappa and Gwet's AC2) and of the per-step flag (`steps`: every step 1..m of the traces both sides
  gave steps for, m the judge's step count; a human step outside 1..m is left out and counted in
  `steps_outside`). Most steps are not backtracking: the per-step flag is the saturated case where
  kappa collapses and AC1 does not;
- across datasets: Kendall tau-b between the judge and the mean human count, with all traces of all
  datasets pooled (our reading of "Kendall tau across datasets"), and per annotator.
A statistic is None when undefined (fewer than 2 shared traces, a constant series, or kappa with
chance agreement 1; `Agreement` says why). Traces the judge has no count for (failed/overflow) are left out and counted.
"""

from __future__ import annotations

import itertools
import math
from collections import defaultdict
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from legival_core import untrusted_json
from legival_core.agreement import Agreement
from legival_core.agreement import agreement as rater_agreement
from legival_core.readers.input_files import COMPRESSED_SUFFIXES, InputFileError, sniff, supported
from legival_core.readers.records import LineProblem, read_jsonl_records
from legival_core.readers.tables import csv_rows

JUDGE = "judge"
FLAG = (False, True)
"""The binary label's scale: backtracking detected (count > 0) or not, per trace or per step."""
COUNT_BINS = ("0", "1", "2", "3+")
"""The ordinal scale of binned counts: a count c is bin min(c, 3) (a trace with 3 flagged steps or
more is one bin: counts past 3 are rare and their exact value is the noisiest)."""


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


def _what_is_read(e: InputFileError) -> InputFileError:
    """The opener's error, ending with what this reader reads (CSV too, not only JSONL)."""
    return InputFileError(e.file, e.message.replace(supported(False), "this command reads CSV or JSONL, plain or "
                                                                      "compressed with gzip or zstd"))


def _rows(p: Path) -> Iterator[tuple[str, Mapping[str, Any]]]:
    """(FILE:LINE, row) of every annotation row of a CSV or JSONL file."""
    if _format_of(p) == "csv":
        try:
            for line, csv_row in csv_rows(p):  # plain or gzip/zstd-compressed; a quoted cell may span lines
                yield f"{p}:{line}", csv_row
        except InputFileError as e:
            raise _what_is_read(e) from None
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
    flag: Agreement
    binned: Agreement
    steps: Agreement
    steps_outside: int


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


Steps = Mapping[str, tuple[int, ...]]
"""trace_id -> the distinct flagged step numbers (1..m), for the traces whose steps a rater gave."""


def _pair(
    a_name: str, b_name: str, a: Mapping[str, int], b: Mapping[str, int], ids: Sequence[str],
    steps: tuple[Steps, Steps, Mapping[str, int]],
) -> PairStats:
    shared = [t for t in ids if t in a and t in b]
    xa = [a[t] for t in shared]
    xb = [b[t] for t in shared]
    flag = rater_agreement([x > 0 for x in xa], [x > 0 for x in xb], FLAG)
    last = len(COUNT_BINS) - 1
    binned = rater_agreement([min(x, last) for x in xa], [min(x, last) for x in xb], range(len(COUNT_BINS)),
                             ordinal=True)
    per_step, outside = _step_flags(shared, *steps)
    return PairStats(
        a_name, b_name, len(shared), spearman(xa, xb), rater_agreement(xa, xb).kappa, flag.kappa, flag, binned,
        per_step, outside,
    )


def _step_flags(shared: Sequence[str], a: Steps, b: Steps, m: Mapping[str, int]) -> tuple[Agreement, int]:
    """The per-step flag of both raters over steps 1..m of the shared traces both gave steps for, and
    how many of their steps fell outside 1..m (left out)."""
    fa: list[bool] = []
    fb: list[bool] = []
    outside = 0
    for t in shared:
        if t not in a or t not in b or t not in m:
            continue
        sa, sb = set(a[t]), set(b[t])
        outside += sum(not 1 <= s <= m[t] for s in sa) + sum(not 1 <= s <= m[t] for s in sb)
        fa += [j in sa for j in range(1, m[t] + 1)]
        fb += [j in sb for j in range(1, m[t] + 1)]
    return rater_agreement(fa, fb, FLAG), outside


def agreement(
    human: Sequence[HumanAnnotation],
    judge_counts: Mapping[str, int],
    datasets: Mapping[str, str],
    judge_steps: Steps | None = None,
    steps_of: Mapping[str, int] | None = None,
) -> AgreementReport:
    """Per-dataset and pooled agreement; `judge_counts` maps trace_id -> judge's count of flagged steps,
    `judge_steps` to its flagged steps and `steps_of` to the trace's step count m (the per-step flag is
    compared where they and an annotator's steps are given)."""
    by_annotator: dict[str, dict[str, int]] = defaultdict(dict)
    steps_by: dict[str, dict[str, tuple[int, ...]]] = defaultdict(dict)
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
        if h.steps is not None:
            steps_by[h.annotator][h.trace_id] = h.steps
    js, m = judge_steps or {}, steps_of or {}
    annotators = sorted(by_annotator)
    ids_by_ds: dict[str, list[str]] = defaultdict(list)
    for tid in sorted({t for d in by_annotator.values() for t in d}):
        ids_by_ds[datasets[tid]].append(tid)
    per_ds = []
    for ds in sorted(ids_by_ds):
        ids = ids_by_ds[ds]
        hj = tuple(_pair(a, JUDGE, by_annotator[a], judge_counts, ids, (steps_by[a], js, m)) for a in annotators)
        hh = tuple(
            _pair(a, b, by_annotator[a], by_annotator[b], ids, (steps_by[a], steps_by[b], m))
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
