"""Reward models (paper section 5.3): scalar outcome RMs and a process RM, loaded with transformers.

Input: the chat [user: question, assistant: reasoning + "\\n\\n" + answer_text] rendered with the
RM's own chat template (the trace is scored as the assistant's response; the PRM gets its model
card's system prompt and steps joined by its separator).

Truncation policy (docs/generation.md): when the rendered input exceeds `max_length` tokens, tokens
are dropped from the START of the reasoning (the question and the end of the trace, where the final
answer is, are kept), the input is re-rendered, and the row records `truncated` and the number of
reasoning tokens dropped. Scalar RMs read the score at the last token, so keeping the end matters
more than keeping the beginning.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from dataclasses import dataclass, fields
from pathlib import Path
from typing import Any, Literal

Kind = Literal["scalar", "prm"]
Aggregate = Literal["min", "mean", "last"]
PRM_AGGREGATES: tuple[Aggregate, ...] = ("min", "mean", "last")
RM_CODE_VERSION = "rm-1"
"""Code version of the reward-model rows (bump when scoring changes)."""
PRM_SYSTEM = "Please reason step by step, and put your final answer within \\boxed{}."


@dataclass(frozen=True, slots=True)
class RewardModelSpec:
    """A reward model by name. `path` (or env LEGIVAL_RM_<NAME>) points at a local copy; otherwise
    `model` is loaded from the local Hugging Face cache (offline)."""

    name: str
    model: str
    kind: Kind = "scalar"
    path: str | None = None
    max_length: int = 8192
    batch_size: int = 4
    dtype: str = "bfloat16"
    step_separator: str = "<extra_0>"
    steps: Literal["paragraphs", "sentences"] = "paragraphs"

    def source(self) -> str:
        env = os.environ.get("LEGIVAL_RM_" + "".join(c if c.isalnum() else "_" for c in self.name).upper())
        return env or self.path or self.model

    def metric_names(self) -> list[str]:
        """The stored metric names: `rm:<name>` (scalar), `rm:<name>:min|mean|last` (PRM)."""
        base = f"rm:{self.name}"
        return [f"{base}:{a}" for a in PRM_AGGREGATES] if self.kind == "prm" else [base]

    def columns(self) -> list[str]:
        """The teacher_metrics.csv columns: `rm_<name>[_<aggregate>]`."""
        return ["rm_" + m.removeprefix("rm:").replace(":", "_") for m in self.metric_names()]

    def params(self) -> dict[str, Any]:
        p: dict[str, Any] = {"model": self.model, "max_length": self.max_length, "truncation": "drop_head"}
        if self.kind == "prm":
            p |= {"separator": self.step_separator, "steps": self.steps}
        return p



def spec_default(name: str) -> Any:
    """The default of a `RewardModelSpec` field (what `legival rm`'s options fall back to)."""
    return next(f.default for f in fields(RewardModelSpec) if f.name == name)

DEFAULT_MODELS: tuple[RewardModelSpec, ...] = (
    RewardModelSpec("skywork-v2-llama-8b", "Skywork/Skywork-Reward-V2-Llama-3.1-8B"),
    RewardModelSpec("rb2-llama-8b", "allenai/Llama-3.1-8B-Instruct-RM-RB2"),
    RewardModelSpec("qwen2.5-math-prm-7b", "Qwen/Qwen2.5-Math-PRM-7B", kind="prm", batch_size=1),
)


class RewardModelUnavailable(RuntimeError):
    """The weights are not installed locally; the message says where they were looked for."""


@dataclass(frozen=True, slots=True)
class TraceInput:
    trace_id: str
    question: str
    reasoning: str
    answer_text: str


@dataclass(frozen=True, slots=True)
class Score:
    """One trace's score: `value` (scalar RM) or per-step probabilities (PRM), with truncation."""

    trace_id: str
    value: float | None
    n_tokens: int
    truncated: bool
    dropped_tokens: int
    step_scores: tuple[float, ...] = ()

    def aggregate(self, how: Aggregate) -> float | None:
        s = self.step_scores
        if not s:
            return None
        return min(s) if how == "min" else sum(s) / len(s) if how == "mean" else s[-1]


def split_steps(reasoning: str, how: str) -> list[str]:
    if how == "sentences":
        from legival_core.segment import segment

        return segment(reasoning).sentences()
    return [p.strip() for p in reasoning.split("\n\n") if p.strip()]


class _Base:
    def __init__(self, spec: RewardModelSpec, device: str | None = None) -> None:
        os.environ.setdefault("HF_HUB_OFFLINE", "1")
        import torch

        self.spec = spec
        self._torch = torch
        self.device = device or ("cuda" if torch.cuda.is_available() else "cpu")
        src = spec.source()
        try:
            from transformers import AutoTokenizer

            self.tokenizer = AutoTokenizer.from_pretrained(src)
            self.model = self._load(src).to(self.device).eval()
        except (OSError, ValueError) as e:
            where = src if Path(src).exists() else f"{src} (not in the local Hugging Face cache)"
            first = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
            raise RewardModelUnavailable(f"reward model {spec.name!r} unavailable: {where}: {first}") from e
        if self.tokenizer.pad_token_id is None:
            self.tokenizer.pad_token = self.tokenizer.eos_token
        if getattr(self.model.config, "pad_token_id", None) is None:
            self.model.config.pad_token_id = self.tokenizer.pad_token_id

    def _load(self, src: str) -> Any:
        raise NotImplementedError

    def _render(self, t: TraceInput, reasoning: str) -> str:
        raise NotImplementedError

    def _fit(self, t: TraceInput) -> tuple[list[int], int]:
        """Token ids of the rendered input within max_length, and how many reasoning tokens were dropped."""
        ids = self._ids(self._render(t, t.reasoning))
        excess = len(ids) - self.spec.max_length
        if excess <= 0:
            return ids, 0
        r_ids = self._ids(t.reasoning)
        drop = excess
        while True:
            drop = min(drop, len(r_ids))
            kept = str(self.tokenizer.decode(r_ids[drop:]))
            ids = self._ids(self._render(t, kept))
            if len(ids) <= self.spec.max_length or drop >= len(r_ids):
                return ids[-self.spec.max_length :], drop
            drop += len(ids) - self.spec.max_length

    def _ids(self, text: str) -> list[int]:
        return list(self.tokenizer(text, add_special_tokens=False)["input_ids"])

    def _batch(self, rows: Sequence[list[int]]) -> tuple[Any, Any]:
        torch = self._torch
        width = max(len(r) for r in rows)
        pad = int(self.tokenizer.pad_token_id)
        ids = torch.full((len(rows), width), pad, dtype=torch.long)
        mask = torch.zeros((len(rows), width), dtype=torch.long)
        for i, r in enumerate(rows):  # right padding: real tokens first
            ids[i, : len(r)] = torch.tensor(r)
            mask[i, : len(r)] = 1
        return ids.to(self.device), mask.to(self.device)

    def score(self, traces: Sequence[TraceInput]) -> list[Score]:
        out: list[Score] = []
        fitted = [self._fit(t) for t in traces]
        order = sorted(range(len(traces)), key=lambda i: len(fitted[i][0]))  # similar lengths batch well
        results: dict[int, Score] = {}
        with self._torch.inference_mode():
            for start in range(0, len(order), self.spec.batch_size):
                idx = order[start : start + self.spec.batch_size]
                for i, s in zip(idx, self._forward([traces[i] for i in idx], [fitted[i] for i in idx]), strict=True):
                    results[i] = s
        out = [results[i] for i in range(len(traces))]
        return out

    def _forward(self, traces: Sequence[TraceInput], fitted: Sequence[tuple[list[int], int]]) -> list[Score]:
        raise NotImplementedError

    def close(self) -> None:
        self.model = None


class ScalarRewardModel(_Base):
    """AutoModelForSequenceClassification with one output: the score read at the last real token."""

    def _load(self, src: str) -> Any:
        from transformers import AutoModelForSequenceClassification

        return AutoModelForSequenceClassification.from_pretrained(src, dtype=getattr(self._torch, self.spec.dtype),
                                                                  num_labels=1)

    def _render(self, t: TraceInput, reasoning: str) -> str:
        response = f"{reasoning}\n\n{t.answer_text}".strip()
        chat = [{"role": "user", "content": t.question}, {"role": "assistant", "content": response}]
        return str(self.tokenizer.apply_chat_template(chat, tokenize=False))

    def _forward(self, traces: Sequence[TraceInput], fitted: Sequence[tuple[list[int], int]]) -> list[Score]:
        rows = [f[0] for f in fitted]
        ids, mask = self._batch(rows)
        # The model pools at the rightmost token that is not the pad token (right padding here).
        values = self.model(input_ids=ids, attention_mask=mask).logits.float()[:, 0]
        return [Score(t.trace_id, float(v), len(r), d > 0, d) for t, r, (_, d), v in
                zip(traces, rows, fitted, values.tolist(), strict=True)]


class ProcessRewardModel(_Base):
    """Qwen2.5-Math-PRM style: steps joined by a separator token; the probability of the positive
    class (label 1) at each separator is that step's score."""

    def _load(self, src: str) -> Any:
        from transformers import AutoConfig, AutoModel, AutoModelForTokenClassification

        dtype = getattr(self._torch, self.spec.dtype)
        config = AutoConfig.from_pretrained(src, trust_remote_code=True)
        if "AutoModel" in (getattr(config, "auto_map", None) or {}):
            # Qwen2.5-Math-PRM ships its own head (Qwen2ForProcessRewardModel); a stock token-
            # classification class would load the trunk with a randomly initialised head.
            return AutoModel.from_pretrained(src, dtype=dtype, trust_remote_code=True)
        return AutoModelForTokenClassification.from_pretrained(src, dtype=dtype)

    def _render(self, t: TraceInput, reasoning: str) -> str:
        sep = self.spec.step_separator
        steps = split_steps(reasoning, self.spec.steps) or [reasoning]
        response = sep.join(steps) + sep
        chat = [{"role": "system", "content": PRM_SYSTEM}, {"role": "user", "content": t.question},
                {"role": "assistant", "content": response}]
        return str(self.tokenizer.apply_chat_template(chat, tokenize=False))

    def _forward(self, traces: Sequence[TraceInput], fitted: Sequence[tuple[list[int], int]]) -> list[Score]:
        torch = self._torch
        sep_id = self.tokenizer.convert_tokens_to_ids(self.spec.step_separator)
        rows = [f[0] for f in fitted]
        ids, mask = self._batch(rows)
        out = self.model(input_ids=ids, attention_mask=mask)
        logits = (out.logits if hasattr(out, "logits") else out[0]).float()
        probs = torch.softmax(logits, dim=-1)[..., 1]
        scores = []
        for i, (t, r, (_, d)) in enumerate(zip(traces, rows, fitted, strict=True)):
            at = (ids[i, : len(r)] == sep_id).nonzero().flatten()
            steps = tuple(float(x) for x in probs[i, at].tolist())
            scores.append(Score(t.trace_id, None, len(r), d > 0, d, steps))
        return scores


def load_reward_model(spec: RewardModelSpec, device: str | None = None) -> ScalarRewardModel | ProcessRewardModel:
    return ProcessRewardModel(spec, device) if spec.kind == "prm" else ScalarRewardModel(spec, device)
