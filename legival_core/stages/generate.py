"""The generate stage: teacher traces from a model, stored exactly like ingested ones (issue 7).

Prompts are [system: dataset prompt (appendix A.1), user: question] with the generation prompt
added by the model's chat template. Decoding is the model config's recommended one (temperature,
top_p, top_k; seeded per problem) or greedy on request. Raw generations are cached in `generations` by (model, prompt,
applied decoding, problem) and written there batch by batch, so an interrupted run resumes and a
rerun generates nothing. The traces then go through `legival_core.ingest.ingest_file` on a JSONL
file of records: the same parsing, grading, trace ids and idempotent inserts as `legival ingest`.
"""

from __future__ import annotations

import json
import tempfile
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from legival_core.backends.base import ChatMessage, Sampling
from legival_core.datasets.base import get_dataset
from legival_core.generation import cache
from legival_core.generation.config import Decoding, ModelConfig
from legival_core.generation.engines import TeacherEngine
from legival_core.generation.extract import extract_reasoning
from legival_core.ingest import ingest_file
from legival_core.store import Store
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


def run_generate(
    store: Store,
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
    recommended one (seeded sampling per problem) unless `greedy` or the config says temperature 0."""
    import time

    spec = get_dataset(dataset)
    budget = max_new_tokens or config.decoding.max_new_tokens
    kwargs = config.chat_template_kwargs if getattr(engine, "template_kwargs_applied", False) else {}
    decoding = applied_decoding(budget, kwargs, None if greedy else config.decoding, seed)
    summary = GenerateSummary(teacher, engine.model_id, spec.name, problems=len(problems), decoding=decoding)
    cache.ensure_table(store)

    prompts = [engine.prompt_of(teacher_messages(spec.system_prompt, p.question)) for p in problems]
    keys = [cache.cache_key(engine.model_id, pr, decoding, spec.name, p.problem_id)
            for p, pr in zip(problems, prompts, strict=True)]
    rows = cache.cached(store, keys)
    summary.cached = len(rows)
    todo = [i for i, k in enumerate(keys) if k not in rows]
    done = summary.cached
    if progress:
        progress(done, len(problems))
    for start in range(0, len(todo), batch_size):
        batch = todo[start : start + batch_size]
        t0 = time.perf_counter()
        outs = engine.generate([prompts[i] for i in batch], budget,
                               [problem_sampling(decoding, problems[i].problem_id) for i in batch])
        summary.generate_s += time.perf_counter() - t0
        new = []
        for i, out in zip(batch, outs, strict=True):
            summary.completion_tokens += out.completion_tokens
            new.append({"cache_key": keys[i], "model": engine.model_id, "teacher": teacher, "dataset": spec.name,
                        "problem_id": problems[i].problem_id, "prompt_hash": content_hash(prompts[i]),
                        "decoding": json.dumps(decoding, sort_keys=True), "text": out.text,
                        "reasoning_content": out.reasoning_content, "finish_reason": out.finish_reason,
                        "prompt_tokens": out.prompt_tokens, "completion_tokens": out.completion_tokens})
        cache.insert(store, new)
        rows.update({str(r["cache_key"]): r for r in new})
        summary.generated += len(new)
        done += len(new)
        if progress:
            progress(done, len(problems))

    records = []
    for p, prompt, key in zip(problems, prompts, keys, strict=True):
        row = rows[key]
        if row["finish_reason"] == "overflow":
            summary.overflow += 1
            continue
        records.append(trace_record(teacher, p, prompt, row, config, decoding))
    if records:
        with tempfile.TemporaryDirectory() as tmp:
            path = Path(tmp) / f"generated-{_safe(teacher)}-{spec.name}.jsonl"
            path.write_text("".join(json.dumps(r, ensure_ascii=False) + "\n" for r in records), encoding="utf-8")
            ingested = ingest_file(store, path)
        summary.new_traces = ingested.new_traces
        summary.already_stored = ingested.already_stored
        summary.unparsed = ingested.unparsed
    summary.truncated = sum(bool(r["truncated"]) for r in records)
    ids = [trace_id_of(teacher, spec.name, r["problem_id"], r["reasoning"], r["response"]) for r in records]
    summary.correct = _count_correct(store, spec.name, ids)
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


def _count_correct(store: Store, dataset: str, trace_ids: list[str]) -> int:
    """Correct traces of this run (one trace id per record, as ingest computes it)."""
    spec = get_dataset(dataset)
    frame = store.query(
        "SELECT count(*) AS n FROM grades WHERE grader = ? AND correct AND list_contains(?, trace_id)",
        [f"{spec.name}@{spec.grader_version}", trace_ids],
    )
    return int(frame["n"][0])


def _safe(name: str) -> str:
    return "".join(c if c.isalnum() or c in "-_." else "_" for c in name)[:80]
