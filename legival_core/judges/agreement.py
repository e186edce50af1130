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
import json
import math
from collections import Counter, defaultdict
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

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
        return _parse_steps(json.loads(s))
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
    steps = None if raw_steps is None or (blank_steps and count_given) else _parse_steps(raw_steps)
    count: int | None = None
    if raw_count not in (None, ""):
        count = int(float(str(raw_count)))
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


def load_human_annotations(path: str | Path) -> list[HumanAnnotation]:
    """Read a CSV or JSONL file with trace_id, annotator, and either `steps` or `count`."""
    p = Path(path)
    rows: list[tuple[str, Mapping[str, Any]]] = []
    if p.suffix.lower() == ".csv":
        with p.open(newline="", encoding="utf-8") as f:
            for i, csv_row in enumerate(csv.DictReader(f), start=2):
                rows.append((f"{p.name}:{i}", csv_row))
    elif p.suffix.lower() in (".jsonl", ".ndjson"):
        with p.open(encoding="utf-8") as f:
            for i, line in enumerate(f, start=1):
                if line.strip():
                    rows.append((f"{p.name}:{i}", json.loads(line)))
    else:
        raise ValueError(f"{p}: expected a .csv or .jsonl file")
    out: list[HumanAnnotation] = []
    seen: set[tuple[str, str]] = set()
    for where, row in rows:
        a = _row_to_annotation(row, where)
        if (a.trace_id, a.annotator) in seen:
            raise ValueError(f"{where}: duplicate annotation of {a.trace_id} by {a.annotator}")
        seen.add((a.trace_id, a.annotator))
        out.append(a)
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
