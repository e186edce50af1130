"""Run records: what a `legival run` reported, and the inputs and producer versions it rested on.

`record_run` stores, after the report's tables are computed and before its files are written (so the
report of a run already shows what changed since the previous one):
- the run row: spec name and hash, Prefect flow-run id and UI link when there is one, start and end,
  the counts of what the run computed (new traces, rollouts generated, judge calls, ...);
- `versions`: per producer of a reported number, what changes its output (the parameters and code
  version of each per-trace metric, the graders, the students' keys, the judge and monitor keys, the
  report's bin and bootstrap settings) -- the diff names these as causes;
- `inputs`: per (teacher, dataset), the trace set (count and id hash) and the rollouts per student;
- one `run_metrics` row per (teacher, dataset, metric) of `teacher_dataset_metrics.csv` and per
  (teacher, metric) of `teacher_metrics.csv` (dataset "all"), with the bootstrap interval, the rank and
  the bootstrap replicates (float32) of the bootstrapped metrics.
"""

from __future__ import annotations

import hashlib
import json
import uuid
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any, Protocol

from legival_core.datasets.base import current_graders
from legival_core.intervals import percentile_interval
from legival_core.metrics.base import MetricInfo, all_metrics, stored_trace_metrics
from legival_core.store import Store
from legival_core.store import planner as plan_reads
from legival_core.store import runs as run_reads
from legival_core.types import canonical_json

if TYPE_CHECKING:
    import numpy as np
    import polars as pl

    from legival_core.metrics.base import Efficiency
    from legival_core.run_config import BenchmarkSpec

ALL = "all"
"""The `dataset` of a teacher-level row (as in rank_points.csv)."""


class Replicates(Protocol):
    """The bootstrap replicates a run record keeps (the report's `BootstrapResult` is one)."""

    @property
    def teachers(self) -> list[str]: ...
    @property
    def samples(self) -> dict[str, np.ndarray]: ...
    @property
    def dataset_samples(self) -> dict[str, dict[str, np.ndarray]]: ...
    @property
    def n_resamples(self) -> int: ...


class Settings(Protocol):
    """The report settings a run record keeps (the report's `ReportConfig` is one)."""

    @property
    def efficiency(self) -> Efficiency: ...
    @property
    def n_bins(self) -> int: ...
    @property
    def resamples(self) -> int: ...
    @property
    def seed(self) -> int: ...


class Levels(Protocol):
    @property
    def by_dataset(self) -> pl.DataFrame: ...


class Reported(Protocol):
    """What a run reported, as `record_run` reads it: the report's computed tables (`ReportData` is
    one). A protocol, so that the run records sit below the report and never import it."""

    @property
    def teacher_metrics(self) -> pl.DataFrame: ...
    @property
    def aggregates(self) -> Levels: ...
    @property
    def students(self) -> pl.DataFrame: ...
    @property
    def boot(self) -> Replicates | None: ...
    @property
    def config(self) -> Settings: ...


@dataclass(frozen=True, slots=True)
class RunInfo:
    """What the flow knows about its run that the store does not."""

    spec_name: str
    spec_hash: str
    started_at: datetime
    spec_path: str | None = None
    teachers: tuple[str, ...] | None = None
    """The teachers the run was restricted to (a per-teacher deployment), None: all."""
    flow_run_id: str | None = None
    ui_url: str | None = None
    counts: dict[str, Any] = field(default_factory=dict)
    run_id: str | None = None
    """The id the run took when it started (its `transfer_timings` rows carry it); None: a new one."""


@dataclass(frozen=True, slots=True)
class RecordedRun:
    run_id: str
    seq: int


def spec_hash(spec: BenchmarkSpec) -> str:
    """sha256 (16 hex) of the spec's canonical JSON: two runs of one spec file share it."""
    return hashlib.sha256(canonical_json(spec.model_dump(mode="json")).encode()).hexdigest()[:16]


def new_run_id(now: datetime) -> str:
    return f"{now:%Y%m%dT%H%M%S}-{uuid.uuid4().hex[:6]}"


def record_run(store: Store, data: Reported, info: RunInfo) -> RecordedRun:
    """Store the run row and its metric rows in one transaction."""
    now = datetime.now(UTC).replace(tzinfo=None)
    run_id = info.run_id or new_run_id(now)
    boot = data.boot
    row = {
        "run_id": run_id, "spec_name": info.spec_name, "spec_hash": info.spec_hash, "spec_path": info.spec_path,
        "teachers": json.dumps(list(info.teachers)) if info.teachers else None,
        "started_at": info.started_at.astimezone(UTC).replace(tzinfo=None) if info.started_at.tzinfo
        else info.started_at, "ended_at": now,
        "flow_run_id": info.flow_run_id, "ui_url": info.ui_url, "counts": canonical_json(_jsonable(info.counts)),
        "versions": canonical_json(producer_versions(store, data)),
        "inputs": canonical_json(run_inputs(store, data)),
        "n_resamples": boot.n_resamples if boot is not None else 0, "seed": data.config.seed,
    }
    seq = run_reads.add_run(store, row, snapshot(data))
    return RecordedRun(run_id, seq)


def _jsonable(obj: Any) -> Any:
    """Numbers, strings, booleans and nested dicts/lists of them (a summary's other values dropped)."""
    if isinstance(obj, dict):
        return {str(k): _jsonable(v) for k, v in obj.items() if _jsonable(v) is not None}
    if isinstance(obj, list | tuple):
        return [_jsonable(v) for v in obj]
    if obj is None or isinstance(obj, bool | int | float | str):
        return obj
    return None


# --- the snapshot ------------------------------------------------------------------------------------------


def reported_metrics(frame: pl.DataFrame) -> list[MetricInfo]:
    """The registered metrics with a numeric column in `frame` (a family's name itself has none)."""
    return [m for m in all_metrics() if not m.family and m.name in frame.columns and frame.schema[m.name].is_numeric()]


def snapshot(data: Reported) -> pl.DataFrame:
    """(teacher, dataset, metric, value, ci_low, ci_high, rank, samples) of every reported number."""
    import numpy as np
    import polars as pl

    boot = data.boot
    t_index = {t: i for i, t in enumerate(boot.teachers)} if boot is not None else {}
    rows: list[dict[str, Any]] = []

    def samples_of(arr: np.ndarray | None, teacher: str) -> bytes | None:
        if arr is None or teacher not in t_index:
            return None
        col = arr[:, t_index[teacher]]
        return None if np.isnan(col).all() else col.astype(np.float32).tobytes()

    tm = data.teacher_metrics
    for m in reported_metrics(tm):
        lo_col, hi_col, rank_col = f"{m.name}_ci_low", f"{m.name}_ci_high", f"rank_{m.name}"
        for r in tm.iter_rows(named=True):
            rows.append({
                "teacher": r["teacher"], "dataset": ALL, "metric": m.name, "value": _num(r[m.name]),
                "ci_low": _num(r.get(lo_col)), "ci_high": _num(r.get(hi_col)), "rank": _num(r.get(rank_col)),
                "samples": samples_of(boot.samples.get(m.name) if boot is not None else None, r["teacher"]),
            })
    td = data.aggregates.by_dataset
    for m in reported_metrics(td):
        for r in td.iter_rows(named=True):
            if r["dataset"] == ALL:
                raise ValueError(f"a dataset named {ALL!r} cannot be recorded: it is the teacher level of a run record")
            arr = boot.dataset_samples.get(r["dataset"], {}).get(m.name) if boot is not None else None
            blob = samples_of(arr, r["teacher"])
            lo = hi = None
            if blob is not None:
                s = np.frombuffer(blob, dtype=np.float32).astype(np.float64)[:, None]
                lo_a, hi_a = percentile_interval(s)
                lo, hi = _num(float(lo_a[0])), _num(float(hi_a[0]))
            rows.append({"teacher": r["teacher"], "dataset": r["dataset"], "metric": m.name, "value": _num(r[m.name]),
                         "ci_low": lo, "ci_high": hi, "rank": None, "samples": blob})
    return pl.DataFrame(rows, schema=snapshot_schema())


def snapshot_schema() -> dict[str, Any]:
    import polars as pl

    return {"teacher": pl.Utf8, "dataset": pl.Utf8, "metric": pl.Utf8, "value": pl.Float64, "ci_low": pl.Float64,
            "ci_high": pl.Float64, "rank": pl.Float64, "samples": pl.Binary}


def _num(v: Any) -> float | None:
    if v is None or isinstance(v, bool):
        return None if v is None else float(v)
    f = float(v)
    return None if f != f else f


# --- versions and inputs --------------------------------------------------------------------------------


def producer_versions(store: Store, data: Reported) -> dict[str, Any]:
    """Per producer key (see `dependencies`), what changes its output."""
    efficiency = {tm.name for tm in stored_trace_metrics("efficiency")}
    out: dict[str, Any] = {}
    for tm in stored_trace_metrics():
        out[f"metric:{tm.name}"] = {"params": tm.params(data.config.efficiency), "code_version": tm.version}
    for metric, params, version in run_reads.stored_metric_versions(store).iter_rows():
        if metric not in efficiency and f"metric:{metric}" not in out:
            out[f"metric:{metric}"] = {"params": json.loads(params) if params.startswith("{") else params,
                                       "code_version": version}
    graders = current_graders(plan_reads.stored_datasets(store))
    out["graders"] = {str(d): str(g) for d, g in zip(graders["dataset"].to_list(), graders["grader"].to_list(),
                                                     strict=True)} if graders.height else {}
    out["students"] = dict(zip(data.students["student"].to_list(), data.students["student_key"].to_list(),
                               strict=True))
    out["judge"] = run_reads.judge_keys(store)
    out["monitor"] = run_reads.monitor_supervisors(store)
    out["bins"] = {"n_bins": data.config.n_bins}
    out["bootstrap"] = {"resamples": data.config.resamples, "seed": data.config.seed}  # intervals only: no value depends on it
    return out


def run_inputs(store: Store, data: Reported) -> dict[str, Any]:
    """Per "teacher|dataset": the trace set (`n_traces`, `ids_md5`) and the rollouts per student name."""
    names = dict(zip(data.students["student_key"].to_list(), data.students["student"].to_list(), strict=True))
    out: dict[str, Any] = {}
    for teacher, dataset, n, md5 in run_reads.trace_sets(store).iter_rows():
        out[f"{teacher}|{dataset}"] = {"n_traces": int(n), "ids_md5": str(md5), "rollouts": {}}
    for teacher, dataset, key, n in run_reads.rollout_counts(store).iter_rows():
        cell = out.setdefault(f"{teacher}|{dataset}", {"n_traces": 0, "ids_md5": "", "rollouts": {}})
        cell["rollouts"][names.get(key, key)] = int(n)
    return out


def dependencies(metric: str, versions: dict[str, Any]) -> list[str]:
    """The producer keys of `versions` a reported metric depends on (a cause of its change)."""
    info = {m.name: m for m in all_metrics()}.get(metric)
    metric_keys = [k for k in versions if k.startswith("metric:")]
    efficiency = [f"metric:{tm.name}" for tm in stored_trace_metrics("efficiency")]
    if info is None:
        return []
    if info.source == "trace" and info.stored is not None:
        return [f"metric:{info.stored.name}", *(["judge"] if info.stored.judged else [])]
    if info.source in ("derived", "grades"):  # from the grades, and from the stored metrics it declares
        return ["graders", *[f"metric:{tm.name}" for tm in info.inputs]]
    if info.source == "transfer":
        return ["students", "graders", "bins"]
    if info.source == "monitor":
        return ["monitor"]
    if info.source == "rewards":
        return [k for k in metric_keys if k.startswith("metric:rm:")]
    if f"metric:{metric}" in versions:  # a stored text-quality metric
        return [f"metric:{metric}"]
    return [k for k in metric_keys if k not in efficiency and not k.startswith("metric:rm:")]
