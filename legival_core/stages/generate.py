"""The generate stage: teacher traces from a model, stored exactly like ingested ones (issue 7).

Prompts are [system: dataset prompt (appendix A.1), user: question] with the generation prompt
added by the model's chat template. Decoding is the model config's recommended one (temperature,
top_p, top_k; seeded per problem) or greedy on request.

plan   the problems whose generation the cache (`generations`, keyed by model, prompt, applied
       decoding and problem) lacks;
run    the engine, `batch_size` prompts per call;
commit each batch's cache rows in one transaction (an interrupted run resumes, a rerun generates
       nothing).

Then every problem's generation (cached or new) becomes an ingest record and goes through the ingest
stage (`legival_core.stages.ingest.ingest_records`): the same parsing, grading, trace ids and
one-transaction write as `legival ingest`. `run_generate` runs both.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

from legival_core.backends.base import ChatMessage, Sampling
from legival_core.datasets.base import get_dataset, grader_key
from legival_core.generation.cache import cache_key, cache_row
from legival_core.generation.config import Decoding, ModelConfig, load_model_config
from legival_core.generation.engines import TeacherEngine, make_teacher_engine
from legival_core.generation.extract import extract_reasoning
from legival_core.stages.base import (
    Executor,
    Given,
    Plan,
    StoreAccess,
    Work,
    run_stage,
    store_access,
)
from legival_core.stages.ingest import ingest_records
from legival_core.stages.registered import Job, RunContext, register_stage
from legival_core.store import Store
from legival_core.store import planner as reads
from legival_core.types import Problem, content_hash, trace_id_of

Progress = Callable[[int, int], None]


@dataclass(slots=True)
class GenerateSummary:
    teacher: str
    model: str
    dataset: str
    problems: int = 0
    cached: int = 0
    generated: int = 0
    overflow: int = 0
    truncated: int = 0
    new_traces: int = 0
    already_stored: int = 0
    correct: int = 0
    unparsed: int = 0
    completion_tokens: int = 0
    generate_s: float = 0.0
    decoding: dict[str, Any] = field(default_factory=dict)

    def as_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d["generate_s"] = round(self.generate_s, 3)
        d["tokens_per_s"] = round(self.completion_tokens / self.generate_s, 2) if self.generate_s else None
        return d


def teacher_messages(system_prompt: str, question: str) -> list[ChatMessage]:
    return [ChatMessage("system", system_prompt), ChatMessage("user", question)]


def applied_decoding(max_new_tokens: int, template_kwargs: dict[str, Any], recommended: Decoding | None = None,
                     seed: int = 0) -> dict[str, Any]:
    """What the backend is asked to do, hashed into the cache key: greedy, or the model card's
    sampling (`recommended`, when its temperature is > 0) with the run's base `seed`."""
    if recommended is None or recommended.temperature == 0:
        return {"greedy": True, "temperature": 0.0, "max_new_tokens": max_new_tokens,
                "chat_template_kwargs": template_kwargs}
    return {"greedy": False, "temperature": recommended.temperature, "top_p": recommended.top_p,
            "top_k": recommended.top_k or 0, "seed": seed, "max_new_tokens": max_new_tokens,
            "chat_template_kwargs": template_kwargs}


def problem_sampling(decoding: dict[str, Any], problem_id: str) -> Sampling | None:
    """The request's sampling: its own seed, derived from the base seed and the problem id, so a
    problem's trace does not depend on which batch or run it was generated in."""
    if decoding["greedy"]:
        return None
    seed = int(content_hash(f"{decoding['seed']}:{problem_id}")[:8], 16)
    return Sampling(decoding["temperature"], decoding["top_p"], decoding["top_k"], seed)


@dataclass(frozen=True, slots=True)
class GenerationJob:
    """One problem to generate for: its rendered prompt and cache key."""

    problem: Problem
    prompt: str
    key: str


@dataclass(frozen=True, slots=True)
class GeneratedBatch:
    """The cache rows of one engine call and its cost."""

    rows: list[dict[str, Any]]
    seconds: float
    completion_tokens: int


@dataclass(frozen=True, eq=False)
class GenerateStage:
    """Generate what the cache lacks for `jobs` (one teacher, one dataset) with `engine` (the
    caller's: not closed here)."""

    engine: TeacherEngine
    teacher: str
    dataset: str
    jobs: Sequence[GenerationJob]
    decoding: dict[str, Any]
    batch_size: int = 8
    name: str = "generate"

    def plan(self, store: Store) -> Plan[GenerationJob, GenerateSummary]:
        s = GenerateSummary(self.teacher, self.engine.model_id, self.dataset, problems=len(self.jobs),
                            decoding=self.decoding)
        cached = reads.cached_generations(store, [j.key for j in self.jobs])
        s.cached = len(cached)
        todo = [j for j in self.jobs if j.key not in cached]
        return Plan(todo, s, total=len(self.jobs), done=s.cached)

    def run(self, units: Sequence[GenerationJob], executor: Executor) -> Iterator[list[GeneratedBatch]]:
        work: Work[TeacherEngine, GenerationJob, GeneratedBatch] = Work(
            Given(self.engine), _GenerateChunk(self.teacher, self.dataset, self.decoding), self.batch_size)
        return executor.run(work, units)

    def commit(self, store: Store, results: Sequence[GeneratedBatch], plan: Plan[Any, GenerateSummary]) -> int:
        rows = [r for b in results for r in b.rows]
        with store.transaction():
            store.insert_rows("generations", rows)
        s = plan.summary
        s.generated += len(rows)
        s.generate_s += sum(b.seconds for b in results)
        s.completion_tokens += sum(b.completion_tokens for b in results)
        return len(rows)


@dataclass(frozen=True, slots=True)
class _GenerateChunk:
    teacher: str
    dataset: str
    decoding: dict[str, Any]

    def __call__(self, engine: TeacherEngine, jobs: Sequence[GenerationJob]) -> list[GeneratedBatch]:
        d = self.decoding
        t0 = time.perf_counter()
        outs = engine.generate([j.prompt for j in jobs], d["max_new_tokens"],
                               [problem_sampling(d, j.problem.problem_id) for j in jobs])
        seconds = time.perf_counter() - t0
        rows = [cache_row(j.key, engine.model_id, self.teacher, self.dataset, j.problem.problem_id, j.prompt, d,
                          out.text, out.reasoning_content, out.finish_reason, out.prompt_tokens, out.completion_tokens)
                for j, out in zip(jobs, outs, strict=True)]
        return [GeneratedBatch(rows, seconds, sum(o.completion_tokens for o in outs))]


def generation_jobs(engine: TeacherEngine, dataset: str, problems: Sequence[Problem],
                    decoding: dict[str, Any]) -> list[GenerationJob]:
    spec = get_dataset(dataset)
    jobs = []
    for p in problems:
        prompt = engine.prompt_of(teacher_messages(spec.system_prompt, p.question))
        jobs.append(GenerationJob(p, prompt, cache_key(engine.model_id, prompt, decoding, spec.name, p.problem_id)))
    return jobs


def run_generate(
    store: Store | StoreAccess,
    engine: TeacherEngine,
    teacher: str,
    dataset: str,
    problems: Sequence[Problem],
    config: ModelConfig,
    max_new_tokens: int | None = None,
    batch_size: int = 8,
    progress: Progress | None = None,
    greedy: bool = False,
    seed: int = 0,
) -> GenerateSummary:
    """Generate what the cache lacks, then store every problem's trace. Decoding is the config's
    recommended one (seeded sampling per problem) unless `greedy` or the config says temperature 0;
    `max_new_tokens` None is the config's budget."""
    access = store_access(store) if isinstance(store, Store) else store
    spec = get_dataset(dataset)
    budget = max_new_tokens or config.decoding.max_new_tokens
    kwargs = config.chat_template_kwargs if getattr(engine, "template_kwargs_applied", False) else {}
    decoding = applied_decoding(budget, kwargs, None if greedy else config.decoding, seed)
    jobs = generation_jobs(engine, spec.name, problems, decoding)
    summary = run_stage(GenerateStage(engine, teacher, spec.name, jobs, decoding, batch_size), access,
                        progress=progress)

    with access() as s:
        rows = reads.cached_generations(s, [j.key for j in jobs])
    records = []
    for j in jobs:
        row = rows[j.key]
        if row["finish_reason"] == "overflow":
            summary.overflow += 1
            continue
        records.append(trace_record(teacher, j.problem, j.prompt, row, config, decoding))
    if records:
        ingested = ingest_records(access, f"generated-{_safe(teacher)}-{spec.name}.jsonl", records)
        summary.new_traces = ingested.new_traces
        summary.already_stored = ingested.already_stored
        summary.unparsed = ingested.unparsed
    summary.truncated = sum(bool(r["truncated"]) for r in records)
    ids = [trace_id_of(teacher, spec.name, r["problem_id"], r["reasoning"], r["response"]) for r in records]
    with access() as s:
        summary.correct = reads.count_correct(s, grader_key(spec.name), ids)
    return summary


def trace_record(teacher: str, problem: Problem, prompt: str, row: dict[str, Any], config: ModelConfig,
                 decoding: dict[str, Any]) -> dict[str, Any]:
    """An ingest record (the schema of ../shared/data traces) plus provenance fields."""
    ex = extract_reasoning(row["text"], row["finish_reason"], prompt, row.get("reasoning_content"))
    return {
        "teacher": teacher, "dataset": problem.dataset, "problem_id": problem.problem_id,
        "question": problem.question, "gold": problem.gold, "choices": list(problem.choices) or None,
        "reasoning": ex.reasoning, "response": ex.answer_text, "truncated": ex.truncated,
        "generated_by": row["model"], "cache_key": row["cache_key"], "finish_reason": row["finish_reason"],
        "thinking_format": ex.format, "cut_in_thinking": ex.cut_in_thinking,
        "decoding_applied": decoding, "decoding_recommended": config.decoding.model_dump(),
        "prompt_tokens": row["prompt_tokens"], "completion_tokens": row["completion_tokens"],
    }


def _safe(name: str) -> str:
    return "".join(c if c.isalnum() or c in "-_." else "_" for c in name)[:80]


@dataclass(slots=True)
class TeacherGeneration:
    """A spec teacher's generated traces: per dataset its summary, and the totals."""

    teacher: str
    datasets: list[dict[str, Any]] = field(default_factory=list)
    generated: int = 0
    cached: int = 0
    new_traces: int = 0
    already_stored: int = 0

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


def generate_teacher(store: Store | StoreAccess, teacher: Any, datasets: Sequence[str],
                     progress: Callable[[str, int, int], None] | None = None) -> TeacherGeneration:
    """Generate a spec teacher's traces with `run_generate`: one engine for all its datasets (the
    model loads on first use: prompts are rendered by its chat template). A retry resumes: raw
    generations are cached per batch, and a rerun generates nothing. `datasets` are the spec's
    (`generate.datasets` defaults to them); `progress(dataset, done, total)`."""
    g = teacher.generate
    if g is None:
        raise ValueError(f"teacher {teacher.name!r} has trace files, not `generate`")
    jobs = g.jobs(datasets, teacher.name)
    cfg = load_model_config(g.config, g.model)
    engine = make_teacher_engine(g.backend, g.model, cfg.chat_template_kwargs, cfg.tokenizer, g.backend_options,
                                 g.base_url)
    access = store_access(store) if isinstance(store, Store) else store
    r = TeacherGeneration(teacher.name)
    try:
        for dataset, path in jobs:
            spec = get_dataset(dataset)
            items = list(spec.load(path, g.format))[: g.limit]

            def report(done: int, total: int, dataset: str = spec.name) -> None:
                if progress is not None:
                    progress(dataset, done, total)

            s = run_generate(access, engine, teacher.name, spec.name, items, cfg, g.max_new_tokens, g.batch_size,
                             progress=report, greedy=g.decoding == "greedy", seed=g.seed)
            d = s.as_dict()
            d["problems_file"] = str(path)
            r.datasets.append(d)
            r.generated += s.generated
            r.cached += s.cached
            r.new_traces += s.new_traces
            r.already_stored += s.already_stored
    finally:
        engine.close()
    return r


def _generate_jobs(ctx: RunContext) -> list[Job]:
    """One job per chosen teacher with `generate:`; every missing problems file is an error now,
    before any model loads."""
    spec = ctx.spec
    chosen = [t for t in ctx.chosen() if t.generate is not None]
    for t in chosen:
        assert t.generate is not None
        t.generate.jobs(spec.datasets, t.name)

    def job(teacher: Any) -> Job:
        def run(access: StoreAccess, _executor: Executor | None, progress: Progress | None) -> TeacherGeneration:
            def report(_dataset: str, done: int, total: int) -> None:
                if progress is not None:
                    progress(done, total)

            return generate_teacher(access, teacher, spec.datasets, report)

        return Job("generate", f"generate {teacher.name}", run)

    return [job(t) for t in chosen]


def _generated(results: list[Any]) -> dict[str, Any]:
    return {"new_traces": sum(r.new_traces for r in results), "generated_traces": sum(r.generated for r in results)}


register_stage("generate", "legival generate --db DB --teacher T --dataset D --problems FILE", build=_generate_jobs,
               summarize=_generated, order=20, retry="generation", retries=None, retry_delay_s=10,
               description="teacher traces generated by a model, stored and graded like ingested ones")
