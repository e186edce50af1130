"""What a run shows in the Prefect UI besides its states (docs/orchestration.md, "Monitoring").

- Names: flow runs are named after the spec (`benchmark legival-demo`, `transfer legival-demo`, with
  the teachers when a run is restricted to some: `benchmark legival-demo (gpt-oss-20b)`); task runs
  after their stage's job (`tasks/stages.py`: `ingest <teacher>`, `transfer <teacher> x <dataset> x <student>`).
- Tags: `spec:<spec name>` and `teacher:<name>` per teacher of the run, on the flow run itself (added
  to its deployment's tags), and on every task run and subflow run started inside it.
- The benchmark run: its overall progress artifact (`tasks.progress.RunProgress`), its summary
  counts and the report and dashboard paths in its log, and a markdown artifact
  `ranking-<spec name>` with the rank table (one row per teacher, the headline metrics of
  `teacher_metrics.csv`) and the dashboard path.
"""

from __future__ import annotations

import csv
import logging
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Any

from tasks.progress import BOARD, RunProgress, slug

if TYPE_CHECKING:
    from legival_core.laps import Laps
    from legival_core.run_config import BenchmarkSpec

log = logging.getLogger("legival.orchestration")

"""The benchmark's lap names that its task runs name differently."""


def run_logger() -> Any:
    """The Prefect run logger (its lines reach the run's log in the UI); outside a run, ours."""
    try:
        from prefect.logging import get_run_logger

        return get_run_logger()
    except Exception:  # noqa: BLE001  (MissingContextError: `.fn` in tests, benchmarks)
        return log


def spec_name(path: str) -> str:
    """The spec's `name`; the file's stem if it does not load (the flow reports why)."""
    try:
        from legival_core.run_config import load_spec

        return load_spec(path).name
    except Exception:  # noqa: BLE001
        return Path(path).stem


def run_name(kind: str) -> Callable[[], str]:
    """A `flow_run_name`: `<kind> <spec name>`, plus `(teachers)` when the run names some."""

    def name() -> str:
        from prefect.context import FlowRunContext

        ctx = FlowRunContext.get()
        params = (ctx.parameters if ctx is not None else None) or {}
        teachers = params.get("teachers") or []
        suffix = f" ({', '.join(teachers)})" if teachers else ""
        return f"{kind} {spec_name(str(params.get('spec', '')))}{suffix}"

    name.__name__ = f"{kind}_run_name"
    return name


def run_tags(spec: BenchmarkSpec, teachers: Iterable[str]) -> list[str]:
    return [f"spec:{spec.name}", *(f"teacher:{t}" for t in teachers)]


@contextmanager
def tagged(spec: BenchmarkSpec, teachers: Iterable[str] | None = None) -> Iterator[list[str]]:
    """Tag the current flow run, and every task run and subflow run started inside (default
    teachers: all of the spec's)."""
    from prefect import tags

    names = run_tags(spec, [t.name for t in spec.teachers] if teachers is None else teachers)
    _tag_flow_run(names)
    with tags(*names):
        yield names


def _tag_flow_run(names: list[str]) -> None:
    try:
        from prefect.client.orchestration import get_client
        from prefect.context import FlowRunContext

        ctx = FlowRunContext.get()
        if ctx is None or ctx.flow_run is None:
            return
        have = list(ctx.flow_run.tags or [])
        missing = [t for t in names if t not in have]
        if not missing:  # a subflow run: created with the parent's tags
            return
        with get_client(sync_client=True) as client:
            client.update_flow_run(ctx.flow_run.id, tags=[*have, *missing])
        ctx.flow_run.tags = [*have, *missing]
    except Exception as e:  # noqa: BLE001  (tags are display: they never fail a run)
        log.warning("flow run not tagged: %s", e)


def benchmark_stages(spec: BenchmarkSpec, teachers: Iterable[str] | None = None) -> list[str]:
    """The benchmark flow's stages (its lap names) that this spec runs: the registered stages, in
    order, that have a job for it (`legival_core.stages.registered`)."""
    from legival_core.stages.registered import RunContext, stages_in_order

    ctx = RunContext(spec, tuple(teachers) if teachers else None)
    return [info.name for info in stages_in_order() if info.jobs(ctx)]


class BenchmarkProgress:
    """The benchmark flow's laps, reported to its progress artifact; its closing log and ranking."""

    def __init__(self, spec: BenchmarkSpec, laps: Laps) -> None:
        self.spec, self.laps = spec, laps

    def lap(self, stage: str) -> None:
        self.laps.lap(stage)
        BOARD.stage_done(stage)

    def planned(self, totals: dict[str, Any]) -> None:
        """The run's plan (`plan_task`): its transfer time is the time left until rollouts commit."""
        BOARD.plan_transfer(totals.get("estimated_wall_s"))

    def finish(self, summary: dict[str, Any]) -> None:
        """Log the summary counts and paths; publish the rank table next to the progress."""
        logger = run_logger()
        counts = {k: v for k, v in summary.items() if isinstance(v, int) and not isinstance(v, bool)}
        logger.info("summary: %s", ", ".join(f"{k}={v}" for k, v in counts.items()))
        logger.info("report: %s (%s files)", summary.get("out"), summary.get("report_files"))
        logger.info("dashboard: %s", summary.get("dashboard") or "(not built)")
        publish_ranking(self.spec.name, Path(str(summary.get("out"))), summary.get("dashboard"))


@contextmanager
def benchmark_progress(spec: BenchmarkSpec, teachers: list[str], laps: Laps,
                       stages: list[str] | None = None) -> Iterator[BenchmarkProgress]:
    """Tags (see `tagged`) and the run's progress artifact over `stages` (default `benchmark_stages`),
    from now until the block ends; a failure is written into the artifact before it propagates."""
    shards = sum(1 for st in spec.transfer_students() for t in teachers if st.reads(t)) * len(spec.datasets) \
        if spec.transfer.enabled else 0
    with tagged(spec, teachers):
        BOARD.start_run(RunProgress(spec.name, benchmark_stages(spec, teachers) if stages is None else stages, shards))
        try:
            yield BenchmarkProgress(spec, laps)
        except BaseException as e:
            BOARD.fail_run(e)
            raise
        finally:
            BOARD.end_run()


def publish_markdown(kind: str, spec_name: str, markdown: str, description: str) -> Any:
    """A markdown artifact `<kind>-<spec name>` on the current flow run (None outside one); display
    only, so a failure is logged, never raised."""
    from prefect.context import FlowRunContext

    if FlowRunContext.get() is None:
        return None
    try:
        from prefect.artifacts import create_markdown_artifact

        return create_markdown_artifact(markdown, key=f"{kind}-" + (slug(spec_name) or "run"),
                                        description=f"{spec_name}: {description}")
    except Exception as e:  # noqa: BLE001  (display only)
        log.warning("%s artifact not created: %s", kind, e)
        return None


def publish_plan(spec_name: str, markdown: str) -> Any:
    """The run's plan (`legival plan`'s tables) as a markdown artifact on the current flow run."""
    return publish_markdown("plan", spec_name, markdown, "what this run computes and costs")


def publish_changes(spec_name: str, markdown: str) -> Any:
    """What changed since the previous recorded run (`legival diff`) as a markdown artifact."""
    return publish_markdown("changes", spec_name, markdown, "changes since the last run")


def flow_run_link() -> tuple[str | None, str | None]:
    """(flow-run id, UI link) of the current flow run; the link only with a Prefect server that
    outlives the run (PREFECT_API_URL and PREFECT_UI_URL set): a temporary server's link leads nowhere."""
    try:
        from prefect.runtime import flow_run
        from prefect.settings import get_current_settings

        run_id = flow_run.get_id()
        settings = get_current_settings()
        ui = settings.ui_url if settings.api.url else None
        return run_id, (f"{str(ui).rstrip('/')}/flow-runs/flow-run/{run_id}" if run_id and ui else None)
    except Exception:  # noqa: BLE001  (outside a flow run)
        return None, None


def publish_ranking(spec_name: str, out: Path, dashboard: str | None) -> Any:
    """The markdown artifact of the rank table on the current flow run (None outside one)."""
    from prefect.context import FlowRunContext

    if FlowRunContext.get() is None:
        return None
    return publish_markdown("ranking", spec_name, ranking_markdown(spec_name, out, dashboard),
                            "teacher ranking and dashboard")


def ranking_markdown(spec_name: str, out: Path, dashboard: str | None) -> str:
    lines = [f"## {spec_name}: teacher ranking", "",
             f"Report: `{out}`  ", f"Dashboard: `{dashboard}`" if dashboard else "Dashboard: not built", ""]
    path = out / "teacher_metrics.csv"
    if not path.is_file():
        return "\n".join([*lines, f"No `{path.name}` in the report (no teacher with graded traces)."])
    with path.open(newline="", encoding="utf-8") as f:
        rows = list(csv.DictReader(f))
    return "\n".join([*lines, *rank_table(rows)])


def rank_table(rows: list[dict[str, str]]) -> list[str]:
    """Markdown lines: one row per teacher, ordered by the first headline metric's rank; a cell is
    `value (rank)`, rank 1 the best. Headline metrics: the registry's ranked metrics that exist per
    (teacher, dataset) and have a value here (accuracy, lengths, redundancy, backtracking, FOTU,
    SOTU, regression rate, ...)."""
    from legival_core import markdown
    from legival_core.metrics.base import all_metrics
    from legival_core.safe_csv import unescape

    if not rows:
        return ["No teacher rows."]
    metrics = [m for m in all_metrics() if m.ranked and m.in_teacher_dataset and not m.family
               and any(r.get(m.name) for r in rows)]
    pareto = "on_pareto_frontier" in rows[0]
    first = f"rank_{metrics[0].name}" if metrics else "teacher"
    rows = sorted(rows, key=lambda r: (_num(r.get(first)) is None, _num(r.get(first)) or 0.0, r["teacher"]))
    arrows = {"higher": "↑", "lower": "↓"}
    head = ["teacher", *(f"{m.name} {arrows.get(m.direction or '', '')}".strip() for m in metrics),
            *(["Pareto"] if pareto else [])]
    align = ["---", *["---:"] * len(metrics), *([":---:"] if pareto else [])]
    out = [markdown.row(head), "|" + "|".join(align) + "|"]
    digits = {m.name: _digits([_num(r.get(m.name)) for r in rows]) for m in metrics}
    for r in rows:
        cells = [markdown.cell(unescape(r["teacher"])),
                 *(_cell(r.get(m.name), r.get(f"rank_{m.name}"), digits[m.name]) for m in metrics)]
        if pareto:
            cells.append("yes" if r.get("on_pareto_frontier", "").lower() == "true" else "")
        out.append(markdown.row(cells))
    out += ["", f"{len(rows)} teachers; a cell is value (rank, 1 = best; ↑ higher is better, ↓ lower is better). "
            "Every column: `teacher_metrics.csv`."]
    return out


def _num(text: str | None) -> float | None:
    try:
        return float(text) if text not in (None, "") else None
    except ValueError:
        return None


def _digits(values: list[float | None]) -> int:
    """One format per column: 1 decimal when it holds a value of 100 or more, else 3."""
    return 1 if any(v is not None and abs(v) >= 100 for v in values) else 3


def _cell(value: str | None, rank: str | None, digits: int) -> str:
    v = _num(value)
    if v is None:
        return "-"
    shown = f"{v + 0.0:.{digits}f}"  # + 0.0: no "-0.000"
    r = _num(rank)
    return f"{shown} ({r:g})" if r is not None else shown
