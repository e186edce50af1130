"""Coverage: for every (teacher, dataset, metric), why a number is there or not.

A report keeps one schema whatever stages ran, so an empty cell must say why it is empty:

- `computed`: the value rests on `n` traces (or rollout traces);
- `not run`: the stage that computes it has stored nothing for this cell; `detail` is the command
  (from the registry's stage entry) that computes it;
- `unavailable`: the stage ran but its model is not installed here; `detail` is the stored reason (the
  hint monitors' g-mean²: the stage ran but no number is defined, e.g. no eligible instance; why);
- `too few traces`: the stage ran, but the cell has no trace the metric can use (no correct trace
  for transfer, no first success for SOTU, every trace undefined, ...);
- `failed`: every unit of the cell that its stage tried failed alone (legival_core/stages/isolation.py),
  or its stage failed as a whole for a known reason (a key refused, an endpoint down:
  `stages.conditions.StageFailed`, stored in `stage_failures` until the stage next completes).
  Any status's `detail` then says `failed: N traces (reason)` or `the STAGE stage failed: reason`,
  also when other traces were computed (a judge that failed leaves backtracking on the lexical cues:
  computed, with the judge's failure in the detail); a record skipped at ingest (over the size
  limit) counts for every metric of its cell.

`coverage.csv` has one row per (teacher, dataset, metric) for every registered metric (a metric
family, e.g. other reward models, is left out), and one row per (teacher, dataset) for the step events
(`STEP_EVENTS`, stage `step_events`, docs/step_events.md: the numbers of step_effects.csv and its companions rest
on them), and one per (teacher, dataset) a human study shows (`HUMAN_STUDY`, stage `study`: the `human`
student's answers, docs/study.md "Analysis"); the dashboard shows it as a panel and `legival report` prints a one-line count.
"""

from __future__ import annotations

import json
from typing import TYPE_CHECKING

from legival_core.metrics.base import MetricInfo, all_metrics
from legival_core.quality.group import dimensions, quality_metrics
from legival_core.registry import entry, is_registered
from legival_core.rewards.models import DEFAULT_MODELS
from legival_core.store import Store
from legival_core.store import failures as failure_rows
from legival_core.store import report as reads
from legival_core.store import step_events as step_reads
from legival_core.store import study_grades as study_reads
from legival_core.transfer.step_events import CODE_VERSION as STEPS_VERSION

if TYPE_CHECKING:
    import polars as pl

COMPUTED, NOT_RUN, UNAVAILABLE, TOO_FEW, FAILED = "computed", "not run", "unavailable", "too few traces", "failed"
COLUMNS = ("teacher", "dataset", "metric", "stage", "status", "n", "detail")
STEP_EVENTS = "step_events"
"""The coverage row of the step events (not a registered metric: the step effects' tables rest on it)."""
HUMAN_STUDY = "human_study"
"""The coverage row of the human student's answers (docs/study.md "Analysis"), per (teacher, dataset) shown."""


def stage_command(stage: str) -> str:
    """The command that computes a stage's rows (the registry's stage entry)."""
    try:
        return str(entry("stage", stage).meta.command)
    except KeyError:
        return f"the {stage} stage"


def coverage_table(store: Store, traces: pl.DataFrame, by_dataset: pl.DataFrame, by_student: pl.DataFrame,
                   interventions: dict[str, dict[str, tuple[str, int, str]]] | None = None) -> pl.DataFrame:
    """One row per (teacher, dataset, registered metric) with its status (module docstring);
    `interventions`: per teacher the g-mean² metrics' statuses (`monitorability.teacher_statuses`)."""
    import polars as pl

    metrics = [m for m in all_metrics() if not m.family]
    complete = ~pl.col("truncated")
    cols = sorted({m.trace_column for m in metrics if m.source in ("trace", "derived") and m.trace_column in traces.columns})
    stats = {
        (r["teacher"], r["dataset"]): r
        for r in traces.group_by("teacher", "dataset").agg(
            pl.len().alias("_all"), complete.sum().alias("_complete"),
            pl.col("grade_status").is_not_null().sum().alias("_graded"),
            (pl.col("m").is_not_null().sum() if "m" in traces.columns else pl.lit(0)).alias("_segmented"),
            *[pl.col(c).filter(complete).is_not_null().sum().alias(f"{c}:complete") for c in cols],
            *[pl.col(c).is_not_null().sum().alias(f"{c}:all") for c in cols],
        ).iter_rows(named=True)
    }
    status_rows = reads.metric_status_counts(store)
    td = {(r["teacher"], r["dataset"]): r for r in by_dataset.iter_rows(named=True)}
    failed = failure_rows.failures_by_cell(store)
    stage_failed = failure_rows.stage_failures(store)
    for r in failed.iter_rows(named=True):  # a cell whose every record was skipped at ingest still has a row
        stats.setdefault((r["teacher"], r["dataset"]), {"_all": 0, "_complete": 0, "_graded": 0, "_segmented": 0})
    rows: list[tuple[object, ...]] = []
    for info in metrics:
        for (teacher, dataset), cell in sorted(stats.items()):
            if info.source == "interventions":  # a teacher-level table of its own (hint interventions)
                status, n, detail = (interventions or {}).get(teacher, {}).get(
                    info.name, (NOT_RUN, 0, stage_command(info.stage)))
            else:
                status, n, detail = _status(info, cell, td.get((teacher, dataset), {}), status_rows, teacher, dataset)
            status, detail = _with_failures(info.stage, status, n, detail, failed, teacher, dataset)
            status, detail = _with_stage_failure(info, status, n, detail, stage_failed)
            rows.append((teacher, dataset, info.name, info.stage, status, n, detail))
    rows += _step_rows(store, sorted(stats), td, stats, stage_failed, failed)
    rows += _human_rows(store, traces)
    return pl.DataFrame(rows, orient="row", schema={"teacher": pl.Utf8, "dataset": pl.Utf8, "metric": pl.Utf8,
                                                     "stage": pl.Utf8, "status": pl.Utf8, "n": pl.Int64,
                                                     "detail": pl.Utf8})


def _status(info: MetricInfo, cell: dict[str, object], td: dict[str, object],
            stored: dict[tuple[str, str, str], dict[str, object]], teacher: str, dataset: str) -> tuple[str, int, str]:
    not_run = (NOT_RUN, 0, stage_command(info.stage))
    if info.source in ("trace", "derived"):
        if info.name == "accuracy":
            graded = _int(cell["_graded"])
            return (COMPUTED, graded, "") if graded else not_run
        scope = "complete" if info.complete_only else "all"
        n = _int(cell.get(f"{info.trace_column}:{scope}"))
        if n:
            return COMPUTED, n, ""
        if not _int(cell["_complete" if info.complete_only else "_all"]):
            return TOO_FEW, 0, "no complete trace"
        if info.stored is not None:  # its stage computes a value for every trace: none stored yet
            return not_run
        return TOO_FEW, 0, "undefined for every trace of the cell (e.g. no correct trace)"
    if info.source == "transfer":
        n_transfer = _int(td.get("n_transfer_traces"))
        if n_transfer == 0:
            if not _int(cell.get("_segmented")):  # steps define the transfer traces: not known yet
                return NOT_RUN, 0, f"{stage_command('segment')} (steps), then {stage_command(info.stage)}"
            return TOO_FEW, 0, "no transfer trace (correct, with at least one step)"
        if not _int(td.get("n_rollouts")):
            return not_run
        value = td.get(info.name)
        n = _int(td.get("n_sotu")) if info.name == "sotu" else _int(td.get("n_curve_traces"))
        if value is None:
            why = "no trace with a first success" if info.name == "sotu" else "no trace with a complete curve"
            return TOO_FEW, n, why
        return COMPUTED, n, ""
    if info.source in ("quality", "rewards"):
        base = _base_metric(info)
        hit = stored.get((teacher, dataset, base)) if base else None
        if base is None:  # a dimension score or the Global Index: computed when a member is
            members = _members(info)
            n = sum(_int(stored.get((teacher, dataset, m), {}).get("ok")) for m in members)
            return (COMPUTED, n, "") if n else not_run
        if hit is None:
            return not_run
        if _int(hit.get("ok")):
            return COMPUTED, _int(hit["ok"]), ""
        if _int(hit.get("unavailable")):
            return UNAVAILABLE, 0, reason_of(_str(hit.get("detail"))) or "model not installed"
        return TOO_FEW, 0, "no trace with a defined value"
    if info.source == "monitor":
        hit = stored.get((teacher, dataset, "monitor"))
        return (COMPUTED, _int(hit.get("ok")), "") if hit else not_run
    return COMPUTED, 0, ""


def _step_rows(store: Store, cells: list[tuple[str, str]], td: dict[tuple[str, str], dict[str, object]],
               stats: dict[tuple[str, str], dict[str, object]], stage_failed: dict[str, str],
               failed: pl.DataFrame) -> list[tuple[object, ...]]:
    """One row per (teacher, dataset): its step events of the current version (n = traces with events),
    or why there are none: the rollouts are missing (transfer, then steps), no pair has two observed
    depths (too few traces), or `legival step-events` has not run since the rollouts came."""
    got = {(r["teacher"], r["dataset"]): r for r in step_reads.step_coverage(store, STEPS_VERSION).iter_rows(named=True)}
    rows: list[tuple[object, ...]] = []
    for teacher, dataset in cells:
        c = got.get((teacher, dataset), {})
        n = _int(c.get("traces_with_events"))
        if n:
            status, detail = COMPUTED, ""
        elif not _int(c.get("pairs")):
            if not _int(td.get((teacher, dataset), {}).get("n_transfer_traces")) and _int(
                    stats[(teacher, dataset)].get("_segmented")):
                status, detail = TOO_FEW, "no transfer trace (correct, with at least one step)"
            else:
                status, detail = NOT_RUN, f"{stage_command('transfer')}, then {stage_command('step_events')}"
        elif not _int(c.get("eligible")):
            status, detail = TOO_FEW, "no (trace, student) pair with rollouts at two depths"
        else:
            status, detail = NOT_RUN, stage_command("step_events")
        status, detail = _with_failures("step_events", status, n, detail, failed, teacher, dataset)  # skipped at ingest
        if "step_events" in stage_failed:
            note = f"the step_events stage failed: {stage_failed['step_events']}"
            status, detail = (FAILED, note) if status != COMPUTED else (status, note)
        rows.append((teacher, dataset, STEP_EVENTS, "step_events", status, n, detail))
    return rows


def _human_rows(store: Store, traces: pl.DataFrame) -> list[tuple[object, ...]]:
    """One row per (teacher, dataset) that a human study shows (`HUMAN_STUDY`, stage `study`): n = the
    answers human_study.csv uses (graded by the current grader, of participants not excluded by their
    attention checks); not run (`legival study grade`) while answers wait for a grade; too few traces
    while no answer is stored, or every answer is an excluded participant's. No study: no row."""
    from legival_core.datasets.base import current_graders
    from legival_core.run_config import default_of
    from legival_core.study.settings import StudyAnalysis

    datasets = sorted({d for d in traces["dataset"].unique().to_list() if is_registered("dataset", d)})
    limit = default_of(StudyAnalysis, "max_attention_failures")
    rows: list[tuple[object, ...]] = []
    for r in study_reads.study_grade_cells(store, current_graders(datasets), limit).iter_rows(named=True):
        answers, used, graded = _int(r["answers"]), _int(r["used"]), _int(r["graded"])
        left_out = f"{answers - used} answers of excluded participants left out" if used < answers else ""
        if not answers:
            status, detail = TOO_FEW, "no answer stored yet (legival study serve --db DB --name N)"
        elif not used:
            status, detail = TOO_FEW, f"every answer is an excluded participant's ({left_out})"
        elif graded == 0:
            status, detail = NOT_RUN, stage_command("study")
        else:
            status = COMPUTED
            detail = "; ".join(x for x in (f"{used - graded} answers not graded: {stage_command('study')}"
                                           if graded < used else "", left_out) if x)
        rows.append((r["teacher"], r["dataset"], HUMAN_STUDY, "study", status, graded, detail))
    return rows


STEP_STAGES = ("efficiency", "transfer", "judge", "quality", "step_events")
"""The stages of the metrics that rest on a trace's steps: a trace that failed segmentation has none."""


def _with_failures(stage: str, status: str, n: int, detail: str, failed: pl.DataFrame, teacher: str,
                   dataset: str) -> tuple[str, str]:
    """The status and detail of a cell of `stage` once its failed units are counted: "failed" when
    nothing was computed, and `failed: N traces (reason)` in the detail (after what was there)."""
    if failed.is_empty():
        return status, detail
    hits = [r for r in failed.iter_rows(named=True) if r["teacher"] == teacher and r["dataset"] == dataset
            and _failure_applies(str(r["stage"]), stage)]
    if not hits:
        return status, detail
    count = sum(int(r["failed"]) for r in hits)
    note = f"failed: {count} trace{'s' if count != 1 else ''} ({'; '.join(str(r['reason']) for r in hits)})"
    if status in (NOT_RUN, TOO_FEW) and n == 0:
        return FAILED, note
    return status, f"{detail}; {note}" if detail else note


def _with_stage_failure(info: MetricInfo, status: str, n: int, detail: str,
                        failed: dict[str, str]) -> tuple[str, str]:
    """The status and detail once a failure of the metric's stage as a whole is counted (a judged
    metric also rests on the judge stage)."""
    stages = [info.stage, *(["judge"] if getattr(info.stored, "judged", False) else [])]
    notes = [f"the {st} stage failed: {failed[st]}" for st in stages if st in failed]
    if not notes:
        return status, detail
    note = "; ".join(notes)
    if status in (NOT_RUN, TOO_FEW) and n == 0:
        return FAILED, note
    return status, f"{detail}; {note}" if detail else note


def _failure_applies(failed_stage: str, metric_stage: str) -> bool:
    stage = failed_stage.split(":")[0]
    if stage == "ingest":
        return True
    if stage == "segment":
        return metric_stage in STEP_STAGES
    return stage == metric_stage


def _members(info: MetricInfo) -> list[str]:
    dim = info.name.removeprefix("dim_")
    if dim in dimensions():
        return list(dimensions()[dim])
    return [m for ms in dimensions().values() for m in ms]


def _int(v: object) -> int:
    return int(v) if isinstance(v, int | float) else 0


def _str(v: object) -> str | None:
    return v if isinstance(v, str) else None


def _base_metric(info: MetricInfo) -> str | None:
    """The stored metric a quality/RM column rests on (`clarity_clx_norm` -> `clarity_clx`; dimension
    scores and the Global Index rest on several: None)."""
    if info.source == "rewards":
        for spec in DEFAULT_MODELS:
            for col, stored in zip(spec.columns(), spec.metric_names(), strict=True):
                if col == info.name:
                    return stored
        return None
    name = info.name.removesuffix("_norm")
    if name == "z3_extraction_rate":
        return "z3_acs"
    return name if name in quality_metrics() else None


def summary_line(coverage: pl.DataFrame) -> str:
    """`coverage: 120 computed, 40 not run (legival quality --db DB), 8 unavailable, 2 too few traces`."""
    import polars as pl

    if coverage.height == 0:
        return "coverage: no trace in the store"
    parts = []
    for status in (COMPUTED, NOT_RUN, UNAVAILABLE, TOO_FEW, FAILED):
        sub = coverage.filter(pl.col("status") == status)
        if sub.height == 0:
            continue
        text = f"{sub.height} {status}"
        if status == NOT_RUN:
            text += f" ({'; '.join(sorted(set(sub['detail'].to_list())))})"
        parts.append(text)
    cells = coverage.filter(pl.col("detail").str.contains("failed: ", literal=True)).select("teacher", "dataset").unique()
    if cells.height:
        parts.append(f"failed traces in {cells.height} (teacher, dataset) cell(s) (`failed:` in coverage.csv)")
    return "coverage: " + ", ".join(parts) + " (coverage.csv)"


def reason_of(detail: str | None) -> str | None:
    """The `reason` of a stored row's JSON detail, if any."""
    if not detail:
        return None
    try:
        value = json.loads(detail)
    except ValueError:
        return None
    return str(value.get("reason")) if isinstance(value, dict) and value.get("reason") else None
