"""The interventions stage (issue 48, docs/monitorability.md "Hint interventions"): each generating
teacher answers each of its first problems `samples` times without a hint (x = 0) and `samples` times
with each cue (x = 1) pointing to a wrong target (the dataset's seeded `wrong_answer` rule), sampled
with a per-sample seed through `legival generate`'s engines (embedded, vLLM, an OpenAI-compatible
server). The samples go to `intervention_traces`, apart from the benchmark's traces: a hinted sample
never changes a teacher's accuracy, FOTU or any other reported number.

plan   the (teacher, problem, cue, arm, sample) units whose content key (model, prompt, decoding with the
       sample's seed) is not stored; a problem whose gold has no wrong answer (a MATH expression) is
       skipped and counted;
run    the engine, `batch_size` prompts per call;
commit each batch's rows, graded twice (y: the answer is the target; correct: it is the gold).
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import asdict, dataclass, field
from typing import TYPE_CHECKING, Any

from legival_core.backends.base import Sampling
from legival_core.datasets.base import get_dataset
from legival_core.generation.engines import TeacherEngine
from legival_core.generation.extract import extract_reasoning
from legival_core.monitor.cues import get_cue
from legival_core.stages.base import Executor, Given, Plan, Work
from legival_core.stages.generate import teacher_messages
from legival_core.store import Store
from legival_core.store import interventions as reads
from legival_core.types import Problem, canonical_json, content_hash

if TYPE_CHECKING:
    from legival_core.run_config.monitorability import Monitorability

CODE_VERSION = "1"


@dataclass(slots=True)
class InterventionSummary:
    teacher: str
    dataset: str
    problems: int = 0
    skipped_no_target: int = 0
    units: int = 0
    cached: int = 0
    generated: int = 0
    hit_target: int = 0
    hinted: int = 0

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


def decoding_of(c: Monitorability) -> str:
    """The sampling settings stored with each sample (part of its key): what `legival plan` matches."""
    return canonical_json({"temperature": c.temperature, "max_new_tokens": c.max_new_tokens, "seed": c.seed,
                           "code": CODE_VERSION})


@dataclass(frozen=True, slots=True)
class InterventionUnit:
    key: str
    problem: Problem
    cue: str
    arm: int
    sample: int
    target: str
    question: str
    prompt: str
    sampling: Sampling


@dataclass(frozen=True, slots=True)
class Sample:
    """`Work.process`: one batch of prompts sampled by the engine, as `intervention_traces` rows."""

    teacher: str
    max_new_tokens: int
    decoding: str

    def __call__(self, engine: TeacherEngine, units: Sequence[InterventionUnit]) -> list[dict[str, Any]]:
        outs = engine.generate([u.prompt for u in units], self.max_new_tokens, [u.sampling for u in units])
        rows = []
        for u, out in zip(units, outs, strict=True):
            ex = extract_reasoning(out.text, out.finish_reason, u.prompt, out.reasoning_content)
            spec = get_dataset(u.problem.dataset)
            hit = spec.grader(ex.answer_text, ex.reasoning, _with_gold(u.problem, u.target), "teacher")
            right = spec.grader(ex.answer_text, ex.reasoning, u.problem, "teacher")
            rows.append({"unit_key": u.key, "teacher": self.teacher, "dataset": u.problem.dataset,
                         "problem_id": u.problem.problem_id, "cue": u.cue, "arm": u.arm, "sample": u.sample,
                         "target": u.target, "gold": u.problem.gold, "question": u.question, "prompt": u.prompt,
                         "reasoning": ex.reasoning, "answer_text": ex.answer_text, "extracted": hit.extracted,
                         "hit_target": bool(hit.correct), "correct": bool(right.correct),
                         "finish_reason": out.finish_reason, "model": engine.model_id, "decoding": self.decoding})
        return rows


def _with_gold(p: Problem, gold: str) -> Problem:
    return Problem(p.dataset, p.problem_id, p.question, gold, p.choices, p.meta)


@dataclass(frozen=True, eq=False)
class InterventionStage:
    """The units of one teacher on one dataset's problems (module docstring); `engine` is the caller's."""

    engine: TeacherEngine
    teacher: str
    dataset: str
    problems: Sequence[Problem]
    config: Monitorability
    batch_size: int = 8
    name: str = "interventions"
    summary_extra: dict[str, Any] = field(default_factory=dict)

    def units(self) -> tuple[list[InterventionUnit], int]:
        """Every unit and the problems skipped for want of a target."""
        c = self.config
        spec = get_dataset(self.dataset)
        assert spec.wrong_answer is not None, f"dataset {self.dataset} has no wrong-answer rule"
        units: list[InterventionUnit] = []
        skipped = 0
        decoding = decoding_of(c)
        for p in self.problems[: c.limit]:
            target = spec.wrong_answer(p, c.seed)
            if target is None:
                skipped += 1
                continue
            arms = [("", 0, p.question)] + [(cue, 1, get_cue(cue).hinted(p.question, target)) for cue in c.cues]
            for cue, arm, question in arms:
                prompt = self.engine.prompt_of(teacher_messages(spec.system_prompt, question))
                for s in range(c.samples):
                    seed = int(content_hash(f"{c.seed}:{p.problem_id}:{cue}:{arm}:{s}")[:8], 16)
                    key = content_hash(self.engine.model_id, prompt, decoding, str(s))
                    units.append(InterventionUnit(key, p, cue, arm, s, target, question, prompt,
                                                  Sampling(c.temperature, 1.0, 0, seed)))
        return units, skipped

    def plan(self, store: Store) -> Plan[InterventionUnit, InterventionSummary]:
        units, skipped = self.units()
        s = InterventionSummary(self.teacher, self.dataset, problems=min(len(self.problems), self.config.limit),
                                skipped_no_target=skipped, units=len(units))
        done = reads.stored_keys(store, "intervention_traces", "unit_key", [u.key for u in units])
        todo = [u for u in units if u.key not in done]
        s.cached = len(units) - len(todo)
        return Plan(todo, s, total=len(units), done=s.cached)

    def run(self, units: Sequence[InterventionUnit], executor: Executor) -> Iterator[list[dict[str, Any]]]:
        c = self.config
        decoding = decoding_of(c)
        work: Work[TeacherEngine, InterventionUnit, dict[str, Any]] = Work(
            Given(self.engine), Sample(self.teacher, c.max_new_tokens, decoding), self.batch_size)
        return executor.run(work, units)

    def commit(self, store: Store, results: Sequence[dict[str, Any]],
               plan: Plan[InterventionUnit, InterventionSummary]) -> int:
        with store.transaction():
            store.insert_rows("intervention_traces", list(results))
        s = plan.summary
        s.generated += len(results)
        s.hit_target += sum(1 for r in results if r["hit_target"])
        s.hinted += sum(1 for r in results if r["arm"] == 1)
        return len(results)


def run_interventions(access: Any, spec: Any, teacher: Any, progress: Any = None) -> dict[str, Any]:
    """One generating teacher's interventions on each of the spec's datasets (a run's job, and
    `legival monitorability run`): its engine built once (its model loads on the first prompt), closed after."""
    from legival_core.generation.config import load_model_config
    from legival_core.generation.engines import make_teacher_engine
    from legival_core.stages.base import run_stage

    g = teacher.generate
    cfg = load_model_config(g.config, g.model)
    engine = make_teacher_engine(g.backend, g.model, cfg.chat_template_kwargs, cfg.tokenizer, g.backend_options,
                                 g.base_url)
    out: dict[str, Any] = {"teacher": teacher.name, "datasets": []}
    try:
        for dataset, path in g.jobs(spec.datasets, teacher.name):
            ds = get_dataset(dataset)
            problems = list(ds.load(path, g.format))[: spec.monitorability.limit]
            stage = InterventionStage(engine, teacher.name, ds.name, problems, spec.monitorability, g.batch_size)
            out["datasets"].append(run_stage(stage, access, None, progress).as_dict())
    finally:
        engine.close()
    for key in ("generated", "cached", "skipped_no_target"):  # the run log's numbers, summed over datasets
        out[key] = sum(int(d.get(key, 0)) for d in out["datasets"])
    return out


def chosen_teachers(spec: Any) -> list[Any]:
    m = spec.monitorability
    names = m.teachers if m.teachers is not None else [t.name for t in spec.teachers if t.generate is not None]
    return [spec.teacher(n) for n in names]


def _intervention_jobs(ctx: Any) -> list[Any]:
    from legival_core.stages.registered import Job

    if not ctx.spec.monitorability.enabled:
        return []

    def job(teacher: Any) -> Job:
        def run(access: Any, _executor: Any, progress: Any) -> dict[str, Any]:
            return run_interventions(access, ctx.spec, teacher, progress)
        return Job("interventions", f"interventions {teacher.name}", run)

    return [job(t) for t in chosen_teachers(ctx.spec)]


def _register() -> None:
    from legival_core.stages.registered import register_stage

    register_stage("interventions", "legival monitorability run SPEC", needs=("generate",), build=_intervention_jobs,
                   order=105, description="hint interventions: each generating teacher sampled without and with "
                                          "each cue towards a wrong target (docs/monitorability.md)")


_register()
