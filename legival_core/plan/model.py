"""A plan's records: its shards, generations and times (`legival_core.plan.build` fills them, `render`
prints them; the JSON summary is `BenchmarkPlan.as_dict`)."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any

from legival_core.transfer.cost import EngineWork


@dataclass(slots=True)
class ShardPlan:
    """One transfer shard (teacher, dataset, student) as the flow runs it."""

    teacher: str
    dataset: str
    student: str
    transfer_traces: int = 0
    rollouts_total: int = 0
    rollouts_cached: int = 0
    rollouts_missing: int = 0
    traces_with_work: int = 0
    prompt_tokens: int = 0
    prompt_tokens_computed: int = 0
    decode_budget: int = 0
    forcing_budget: int = 0
    expected_decode: int | None = None
    prompt_tokens_counted: str = "exact"
    chunks: int = 0
    """Chunks the shard's missing traces are sent in (sized by `shard_chunk`, as the flow's shard task does)."""
    work: EngineWork | None = None
    """The expected work of its missing rollouts in the cost model's units (`plan.timing.shard_work`)."""
    seconds: float | None = None
    """Engine seconds of that work at the student's rates (None: no rates for its engine)."""


@dataclass(slots=True)
class GenerationPlan:
    teacher: str
    dataset: str
    model: str
    problems: int
    decode_budget: int


@dataclass(slots=True)
class StudentTime:
    """Wall time of a model's work (a student's rollouts, or a teacher's generations at full budget)."""

    student: str
    model: str
    accelerator: str
    engines: int
    seconds: float | None = None
    gpu_hours: float | None = None
    source: str = ""
    unavailable: str | None = None
    basis: str = ""
    """calibrated (this store's recorded runs), or the table row's: measured, published, assumption."""
    low_s: float | None = None
    high_s: float | None = None
    """The range the estimate's basis implies (the row's `spread`; equal to `seconds` when it is one number)."""
    load_s: float | None = None
    compute_s: float | None = None
    """Transfer only: the engine load and the rollouts' engine seconds (all engines together)."""
    decode: str = ""
    """Transfer only: where the expected decode comes from (stored rollouts, or the labelled default)."""


@dataclass(slots=True)
class BenchmarkPlan:
    spec: str
    store: str
    traces_stored: int = 0
    traces_new: int = 0
    shards: list[ShardPlan] = field(default_factory=list)
    generation: list[GenerationPlan] = field(default_factory=list)
    sentences_to_embed: int = 0
    traces_missing_efficiency: int = 0
    embedding_model: str = ""
    judge: dict[str, Any] = field(default_factory=dict)
    quality: dict[str, int] = field(default_factory=dict)
    monitorability: dict[str, Any] = field(default_factory=dict)
    """Hint interventions: samples to generate and each monitor's verdicts, calls and cost (`plan.monitorability`)."""
    stages: dict[str, dict[str, int]] = field(default_factory=dict)
    """The other registered stages this run has jobs for: units to compute and units stored (their
    stages' own `plan()`; `legival_core.stages.registered`)."""
    times: list[StudentTime] = field(default_factory=list)
    generation_times: list[StudentTime] = field(default_factory=list)
    prompt_tokenizer: dict[str, str] = field(default_factory=dict)
    decode_expected: dict[str, str] = field(default_factory=dict)
    """Per student: where the decode its time estimate expects comes from."""
    notes: list[str] = field(default_factory=list)

    def totals(self) -> dict[str, Any]:
        keys = ("transfer_traces", "rollouts_total", "rollouts_cached", "rollouts_missing", "prompt_tokens",
                "prompt_tokens_computed", "decode_budget", "forcing_budget")
        out: dict[str, Any] = {k: sum(getattr(s, k) for s in self.shards) for k in keys}
        expected = [s.expected_decode for s in self.shards if s.rollouts_missing]
        out["expected_decode"] = None if any(e is None for e in expected) else sum(e or 0 for e in expected)
        out["shards_with_work"] = sum(1 for s in self.shards if s.rollouts_missing)
        out["generations"] = sum(g.problems for g in self.generation)
        out["judge_calls"] = int(self.judge.get("calls", 0))
        out["judge_cost_usd"] = float(self.judge.get("cost_usd", 0.0))
        out["sentences_to_embed"] = self.sentences_to_embed
        monitors = self.monitorability.get("monitors", [])
        out["intervention_samples"] = int(self.monitorability.get("samples", {}).get("to_generate", 0))
        out["monitor_calls"] = sum(int(x["calls"]) for x in monitors)
        out["monitor_cost_usd"] = round(sum(float(x["cost_usd"]) for x in monitors), 4)
        known = [t for t in self.times if t.seconds is not None]  # students take turns: their times add up
        out["estimated_wall_s"] = round(sum(t.seconds or 0 for t in known)) if known else None
        out["estimated_wall_low_s"] = round(sum(t.low_s or 0 for t in known)) if known else None
        out["estimated_wall_high_s"] = round(sum(t.high_s or 0 for t in known)) if known else None
        out["gpu_hours"] = round(sum(t.gpu_hours or 0 for t in known), 3) if known else None
        gen = [t for t in self.generation_times if t.gpu_hours is not None]
        out["generation_gpu_hours_at_budget"] = round(sum(t.gpu_hours or 0 for t in gen), 3) if gen else None
        return out

    def as_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d["totals"] = self.totals()
        return d
