"""Transfer-utility maths: bins, trace curves, FOTU, first success, SOTU, regression rate, aggregation.

Everything here is a pure function over small typed values (SPEC section 4). Inputs are per-depth mean
correctness values `y_by_k` (depth k in steps -> y_k in [0, 1]) for one (trace, student); the caller has
already dropped overflow rollouts (status 'overflow'), so an absent depth is simply not observed.
"""

from __future__ import annotations

import math
from collections import defaultdict
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

from legival_core.registry import register

N_BINS = 50


@dataclass(frozen=True, slots=True)
class SotuResult:
    """SOTU of one (teacher, dataset, student) and the number of traces with a first success it rests on."""

    value: float | None
    n_traces: int


@dataclass(frozen=True, slots=True)
class RegressionResult:
    """Regression rate of one (trace, student): `rate = count / n_transitions` (SPEC section 4, RR)."""

    rate: float | None
    count: int
    n_transitions: int


@dataclass(frozen=True, slots=True)
class TraceTransfer:
    """Per-(trace, student) transfer results; all metric fields are None when the trace has no curve."""

    teacher: str
    dataset: str
    student: str
    trace_id: str
    curve: tuple[float, ...] | None
    fotu: float | None
    tau: int | None
    rr: float | None
    rr_count: int | None


@dataclass(frozen=True, slots=True)
class MetricMean:
    """A mean over the defined (non-None) values and how many values it rests on (None when n == 0)."""

    value: float | None
    n: int


@dataclass(frozen=True, slots=True)
class CurveMean:
    """A pointwise mean of curves f(1..B) and how many curves it rests on (None when n == 0)."""

    values: tuple[float, ...] | None
    n: int


@dataclass(frozen=True, slots=True)
class StudentAggregate:
    """(teacher, dataset, student): means over traces of FOTU, RR, raw RR count and f(b); SOTU from taus."""

    teacher: str
    dataset: str
    student: str
    fotu: MetricMean
    rr: MetricMean
    rr_count: MetricMean
    sotu: MetricMean
    curve: CurveMean


@dataclass(frozen=True, slots=True)
class DatasetAggregate:
    """(teacher, dataset): each metric is the mean over students; n counts the students with a value."""

    teacher: str
    dataset: str
    fotu: MetricMean
    rr: MetricMean
    rr_count: MetricMean
    sotu: MetricMean
    curve: CurveMean


@dataclass(frozen=True, slots=True)
class TeacherAggregate:
    """teacher: each metric is the unweighted mean over datasets; n counts the datasets with a value."""

    teacher: str
    fotu: MetricMean
    rr: MetricMean
    rr_count: MetricMean
    sotu: MetricMean
    curve: CurveMean


# --- trace level -------------------------------------------------------------------------------------


def _check_bins(m: int, n_bins: int) -> None:
    if m < 1:
        raise ValueError(f"m must be >= 1, got {m}")
    if n_bins < 1:
        raise ValueError(f"n_bins must be >= 1, got {n_bins}")


def bin_of(k: int, m: int, n_bins: int = N_BINS) -> int:
    """Bin of depth k in a trace of m steps (SPEC section 4, "Bins").

    For k >= 1, `bin(k) = ceil(B*k/m) = (B*k + m - 1) // m`, in integer arithmetic so that k/m on a bin
    edge never drifts across it; the prefix fraction k/m then lies in ((b-1)/B, b/B]. k = 0 is the anchor
    at x = 0 and gets bin 0.
    """
    _check_bins(m, n_bins)
    if not 0 <= k <= m:
        raise ValueError(f"depth k must be in 0..m={m}, got {k}")
    if k == 0:
        return 0
    return (n_bins * k + m - 1) // m


def _check_ys(y_by_k: Mapping[int, float], m: int) -> None:
    for k, y in y_by_k.items():
        if not 0 <= k <= m:
            raise ValueError(f"depth k must be in 0..m={m}, got {k}")
        if not 0.0 <= y <= 1.0:
            raise ValueError(f"y_k is a mean correctness in [0, 1], got y_{k} = {y!r}")


def trace_curve(y_by_k: Mapping[int, float], m: int, n_bins: int = N_BINS) -> tuple[float, ...]:
    """The trace curve f(1..B) of one (trace, student) (SPEC section 4, "Trace curve").

    Observed bin value y_b = mean of y_k over the depths k with bin(k) = b. Unobserved bins are linearly
    interpolated in b between the nearest observed points on each side, the anchor (b = 0, y_0) being a
    point. Both ends must be observed: k = 0 (the anchor) and k = m (bin B). A missing end raises
    ValueError rather than extrapolating; `trace_curve_or_none` turns that case into None for callers
    whose depth m (or 0) overflowed the student's context.
    """
    _check_bins(m, n_bins)
    _check_ys(y_by_k, m)
    if 0 not in y_by_k:
        raise ValueError("depth k = 0 (the anchor) is not observed; the curve is undefined")
    if m not in y_by_k:
        raise ValueError(f"depth k = m = {m} (bin B) is not observed; the curve is undefined")
    by_bin: dict[int, list[float]] = defaultdict(list)
    for k, y in y_by_k.items():
        by_bin[bin_of(k, m, n_bins)].append(float(y))
    points = sorted((b, math.fsum(ys) / len(ys)) for b, ys in by_bin.items())
    curve: list[float] = []
    i = 0  # points[i] is the nearest observed point at or left of b
    for b in range(1, n_bins + 1):
        while i + 1 < len(points) and points[i + 1][0] <= b:
            i += 1
        b_left, y_left = points[i]
        if b_left == b:
            curve.append(y_left)
            continue
        b_right, y_right = points[i + 1]
        curve.append(y_left + (y_right - y_left) * (b - b_left) / (b_right - b_left))
    return tuple(curve)


def trace_curve_or_none(
    y_by_k: Mapping[int, float], m: int, n_bins: int = N_BINS
) -> tuple[float, ...] | None:
    """`trace_curve`, or None when depth 0 or depth m was not observed (e.g. excluded as overflow).

    A trace whose full reasoning does not fit the student's context has no curve for that student
    (SPEC section 4, "Too long": never graded as wrong); other invalid input still raises.
    """
    if 0 not in y_by_k or m not in y_by_k:
        _check_bins(m, n_bins)
        return None
    return trace_curve(y_by_k, m, n_bins)


def fotu(curve: Sequence[float]) -> float:
    """FOTU(trace, student) = (1/B) * sum_{b=1..B} f(b) (SPEC section 4)."""
    if not curve:
        raise ValueError("FOTU needs a non-empty curve f(1..B)")
    return math.fsum(curve) / len(curve)


def first_success_bin(y_by_k: Mapping[int, float], m: int, n_bins: int = N_BINS) -> int | None:
    """First success tau = bin(k*), k* = min{k in K, k >= 1 : y_k = 1}; None if none (SPEC section 4).

    With several samples per depth, y_k = 1 means every sample at depth k was correct.
    """
    _check_bins(m, n_bins)
    _check_ys(y_by_k, m)
    successes = [k for k, y in y_by_k.items() if k >= 1 and y == 1]
    if not successes:
        return None
    return bin_of(min(successes), m, n_bins)


def sotu(taus: Sequence[int | None], n_bins: int = N_BINS) -> SotuResult:
    """SOTU(teacher, dataset, student) = H(h) / ln(B) (SPEC section 4).

    h(b) is the share of the traces with a defined tau whose tau = b (None taus are left out) and
    H(h) = -sum h ln h. All taus in one bin give 0; taus spread evenly over all B bins give 1.
    Undefined (value None) when no trace has a tau; n_traces is the number of traces it rests on.
    """
    if n_bins < 2:
        raise ValueError(f"SOTU divides by ln(B); n_bins must be >= 2, got {n_bins}")
    defined = [t for t in taus if t is not None]
    for t in defined:
        if not 1 <= t <= n_bins:
            raise ValueError(f"tau must be a bin in 1..{n_bins}, got {t}")
    n = len(defined)
    if n == 0:
        return SotuResult(value=None, n_traces=0)
    counts: dict[int, int] = defaultdict(int)
    for t in defined:
        counts[t] += 1
    entropy = -math.fsum((c / n) * math.log(c / n) for c in counts.values())
    return SotuResult(value=entropy / math.log(n_bins) + 0.0, n_traces=n)  # + 0.0 turns -0.0 into 0.0


def regression(y_by_k: Mapping[int, float]) -> RegressionResult:
    """Regression rate RR(trace, student) with the raw count (SPEC section 4, the paper's eq. 6).

    Over the observed depths K in ascending order, k = 0 included: count = #{i : y_{k_{i+1}} < y_{k_i}},
    rate = count / (|K| - 1); rate is None when |K| < 2 (then count = n_transitions = 0).
    """
    ys = [y_by_k[k] for k in sorted(y_by_k)]
    n_transitions = max(len(ys) - 1, 0)
    count = sum(1 for a, b in zip(ys, ys[1:], strict=False) if b < a)
    rate = count / n_transitions if n_transitions else None
    return RegressionResult(rate=rate, count=count, n_transitions=n_transitions)


def trace_transfer(
    teacher: str,
    dataset: str,
    student: str,
    trace_id: str,
    y_by_k: Mapping[int, float],
    m: int,
    n_bins: int = N_BINS,
) -> TraceTransfer:
    """All per-(trace, student) metrics of SPEC section 4 from the observed y_k.

    When the trace has no curve (depth m or 0 overflowed), tau and RR are None as well: prompts grow with
    k, so an overflow removes a tail of depths, and a first success that may lie in that tail can be
    neither observed nor ruled out. The trace then takes part in no transfer metric for this student.
    """
    curve = trace_curve_or_none(y_by_k, m, n_bins)
    if curve is None:
        return TraceTransfer(teacher, dataset, student, trace_id, None, None, None, None, None)
    rr = regression(y_by_k)
    return TraceTransfer(
        teacher=teacher,
        dataset=dataset,
        student=student,
        trace_id=trace_id,
        curve=curve,
        fotu=fotu(curve),
        tau=first_success_bin(y_by_k, m, n_bins),
        rr=rr.rate,
        rr_count=rr.count,
    )


# --- aggregation (SPEC section 4, "Aggregation") -------------------------------------------------------


def mean_of_defined(values: Iterable[float | None]) -> MetricMean:
    """Mean of the non-None values and their number; value None when there are none."""
    defined = [float(v) for v in values if v is not None]
    if not defined:
        return MetricMean(value=None, n=0)
    return MetricMean(value=math.fsum(defined) / len(defined), n=len(defined))


def mean_curve(curves: Iterable[Sequence[float] | None]) -> CurveMean:
    """Pointwise mean of the non-None curves (the mu_T(b) averaging); all must have the same length."""
    defined = [tuple(c) for c in curves if c is not None]
    if not defined:
        return CurveMean(values=None, n=0)
    lengths = {len(c) for c in defined}
    if len(lengths) != 1:
        raise ValueError(f"curves of different lengths cannot be averaged: {sorted(lengths)}")
    values = tuple(math.fsum(col) / len(defined) for col in zip(*defined, strict=True))
    return CurveMean(values=values, n=len(defined))


def _values(results: Iterable[MetricMean]) -> list[float | None]:
    return [r.value for r in results]


def aggregate_by_student(rows: Iterable[TraceTransfer], n_bins: int = N_BINS) -> tuple[StudentAggregate, ...]:
    """(teacher, dataset, student) level: FOTU, RR, raw count and f(b) are means over traces with a
    value; SOTU is computed from the traces' taus. Sorted by (teacher, dataset, student)."""
    groups: dict[tuple[str, str, str], list[TraceTransfer]] = defaultdict(list)
    for r in rows:
        groups[(r.teacher, r.dataset, r.student)].append(r)
    out = []
    for (teacher, dataset, student), rs in sorted(groups.items()):
        s = sotu([r.tau for r in rs], n_bins)
        out.append(
            StudentAggregate(
                teacher=teacher,
                dataset=dataset,
                student=student,
                fotu=mean_of_defined(r.fotu for r in rs),
                rr=mean_of_defined(r.rr for r in rs),
                rr_count=mean_of_defined(r.rr_count for r in rs),
                sotu=MetricMean(value=s.value, n=s.n_traces),
                curve=mean_curve(r.curve for r in rs),
            )
        )
    return tuple(out)


def aggregate_by_dataset(students: Iterable[StudentAggregate]) -> tuple[DatasetAggregate, ...]:
    """(teacher, dataset) level: the mean over students of each metric and of f(b), None values skipped.
    Sorted by (teacher, dataset)."""
    groups: dict[tuple[str, str], list[StudentAggregate]] = defaultdict(list)
    for s in students:
        groups[(s.teacher, s.dataset)].append(s)
    return tuple(
        DatasetAggregate(
            teacher=teacher,
            dataset=dataset,
            fotu=mean_of_defined(_values(s.fotu for s in ss)),
            rr=mean_of_defined(_values(s.rr for s in ss)),
            rr_count=mean_of_defined(_values(s.rr_count for s in ss)),
            sotu=mean_of_defined(_values(s.sotu for s in ss)),
            curve=mean_curve(s.curve.values for s in ss),
        )
        for (teacher, dataset), ss in sorted(groups.items())
    )


def aggregate_by_teacher(datasets: Iterable[DatasetAggregate]) -> tuple[TeacherAggregate, ...]:
    """teacher level: the unweighted mean over datasets of each metric and of f(b) (mu_T(b)), None
    values skipped. Sorted by teacher."""
    groups: dict[str, list[DatasetAggregate]] = defaultdict(list)
    for d in datasets:
        groups[d.teacher].append(d)
    return tuple(
        TeacherAggregate(
            teacher=teacher,
            fotu=mean_of_defined(_values(d.fotu for d in ds)),
            rr=mean_of_defined(_values(d.rr for d in ds)),
            rr_count=mean_of_defined(_values(d.rr_count for d in ds)),
            sotu=mean_of_defined(_values(d.sotu for d in ds)),
            curve=mean_curve(d.curve.values for d in ds),
        )
        for teacher, ds in sorted(groups.items())
    )


register("metric", "trace_curve", trace_curve)
register("metric", "fotu", fotu)
register("metric", "first_success_bin", first_success_bin, aliases=("tau",))
register("metric", "sotu", sotu)
register("metric", "rr", regression, aliases=("regression", "regression_rate"))
