"""The hint_monitor stage (issue 48, docs/monitorability.md "Monitors"): every monitor's verdict, in
every scope, on every intervention sample: a hinted sample for its own cue, an unhinted one for each
cue of the spec (the negatives that measure false alarms). Verdicts are keyed by (monitor, prompt
version, sample, cue, scope): a rerun asks nothing twice, as judge calls are cached.

plan   the verdicts not stored; run: the lexical monitor in-process, an LLM monitor through its judge
backend (`judges.base.BaseJudge.ask`: retries, rate limits, secrets kept out), `batch` items a chunk;
commit: one transaction per chunk. An LLM reply that is no verdict is stored `unparsed` (z null),
counted in the summary and left out of g-mean² (never read as 0 or 1).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from dataclasses import asdict, dataclass
from typing import TYPE_CHECKING, Any

from legival_core.monitor.hint_judge import PROMPT_VERSION, SYSTEM, Verdict, lexical, llm_prompt, parse_reply
from legival_core.stages.base import Executor, Plan, Work
from legival_core.store import Store
from legival_core.store import interventions as reads
from legival_core.types import canonical_json, content_hash

if TYPE_CHECKING:
    from legival_core.run_config.monitorability import HintMonitor, Monitorability


@dataclass(slots=True)
class HintMonitorSummary:
    monitor: str
    items: int = 0
    cached: int = 0
    asked: int = 0
    unparsed: int = 0
    flagged: int = 0

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


def monitor_key(m: HintMonitor) -> str:
    """What changes a monitor's verdicts (never its timeouts)."""
    return content_hash(canonical_json({"kind": m.kind, "judge": m.judge if m.kind == "llm" else None,
                                        "model": m.model, "max_output_tokens": m.max_output_tokens}))


@dataclass(frozen=True, slots=True)
class BuildJudge:
    """`Work.setup` of an LLM monitor: its judge backend (keys from the environment, as `legival judge`)."""

    judge: str
    model: str | None
    base_url: str | None

    def __call__(self) -> Any:
        from legival_core.judges.factory import make_judge

        return make_judge(self.judge, model=self.model, base_url=self.base_url, concurrency=1, rpm=None)


def _no_worker() -> None:
    return None


@dataclass(frozen=True, slots=True)
class Decide:
    """`Work.process`: the verdicts of one chunk of items."""

    monitor: str
    kind: str
    key: str

    def __call__(self, judge: Any, items: Sequence[dict[str, Any]]) -> list[dict[str, Any]]:
        rows = []
        for it in items:
            if self.kind == "lexical":
                v = lexical(it["cue"], it["reasoning"], it["answer_text"], it["scope"])
            else:
                reply = judge.ask(SYSTEM, llm_prompt(it["cue"], it["target"], it["question"], it["reasoning"],
                                                      it["answer_text"], it["scope"]))
                v = parse_reply(reply.text or "") if reply.text else Verdict(None, "unparsed", None)
            rows.append({"verdict_key": it["verdict_key"], "unit_key": it["unit_key"], "monitor": self.monitor,
                         "monitor_key": self.key, "cue": it["cue"], "scope": it["scope"], "verdict": v.verdict,
                         "status": v.status, "response": v.response})
        return rows


@dataclass(frozen=True, eq=False)
class HintMonitorStage:
    monitor: HintMonitor
    config: Monitorability
    teachers: Sequence[str] | None = None
    batch: int = 32
    name: str = "hint_monitor"

    @property
    def unit_scope(self) -> str:
        return self.monitor.name

    def plan(self, store: Store) -> Plan[dict[str, Any], HintMonitorSummary]:
        key = monitor_key(self.monitor)
        items = []
        for r in reads.intervention_rows(store, self.teachers).iter_rows(named=True):
            cues = [r["cue"]] if r["arm"] == 1 else list(self.config.cues)
            for cue in cues:
                for scope in self.config.scopes:
                    vk = content_hash(key, PROMPT_VERSION, r["unit_key"], cue, scope)
                    items.append({**r, "cue": cue, "scope": scope, "verdict_key": vk})
        s = HintMonitorSummary(self.monitor.name, items=len(items))
        done = reads.stored_keys(store, "hint_verdicts", "verdict_key", [it["verdict_key"] for it in items])
        todo = [it for it in items if it["verdict_key"] not in done]
        s.cached = len(items) - len(todo)
        return Plan(todo, s, total=len(items), done=s.cached)

    def run(self, units: Sequence[dict[str, Any]], executor: Executor) -> Iterator[list[dict[str, Any]]]:
        m = self.monitor
        setup: Callable[[], Any] = BuildJudge(m.judge, m.model, m.base_url) if m.kind == "llm" else _no_worker
        work: Work[Any, dict[str, Any], dict[str, Any]] = Work(setup, Decide(m.name, m.kind, monitor_key(m)),
                                                               self.batch, key=f"hint-monitor:{monitor_key(m)}")
        return executor.run(work, units)

    def commit(self, store: Store, results: Sequence[dict[str, Any]],
               plan: Plan[dict[str, Any], HintMonitorSummary]) -> int:
        with store.transaction():
            store.insert_rows("hint_verdicts", list(results))
        s = plan.summary
        s.asked += len(results)
        s.unparsed += sum(1 for r in results if r["status"] == "unparsed")
        s.flagged += sum(1 for r in results if r["verdict"])
        return len(results)


def _hint_monitor_jobs(ctx: Any) -> list[Any]:
    from legival_core.stages.base import run_stage
    from legival_core.stages.registered import Job

    m = ctx.spec.monitorability
    if not m.enabled:
        return []

    def job(monitor: HintMonitor) -> Job:
        stage = HintMonitorStage(monitor, m, ctx.teachers)

        def run(access: Any, executor: Any, progress: Any) -> HintMonitorSummary:
            return run_stage(stage, access, executor, progress)
        return Job("hint_monitor", f"hint monitor {monitor.name}", run, (stage,))

    return [job(mon) for mon in m.monitors]


def _register() -> None:
    from legival_core.stages.registered import register_stage

    register_stage("hint_monitor", "legival monitorability run SPEC", needs=("interventions",),
                   build=_hint_monitor_jobs, order=106,
                   description="monitors' verdicts on the intervention samples: does the reasoning reveal the hint?")


_register()
