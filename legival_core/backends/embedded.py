"""The embedded student: a small chat model run with transformers on the CPU, no server. A base model
without a chat template (Gemma 3 270M) gets the plain prompt layout of `prompt_format`, and its
continuation ends where it starts a new `Question:` (finish reason "stop").

Rollouts of one trace are prefixes of each other (same system + question, growing assistant prefix),
so a group's longest prompt is prefilled once and every shorter request of the group is served from
that key/value cache: its first token comes from the logits the long prefill already computed at its
last prompt position, and its decode starts from the cache cropped to its length. Prefix reuse is
decided on token ids (the tokenization of a text prefix is not always a prefix of the tokenization),
so only the common token prefix is reused and the rest is prefilled. Reuse is one level deep: a
row shares with the prefilled root it has the longest common prefix with, not with another
partially prefilled row.

Decoding is batched (greedy unless a request samples): rows of a batch are left-padded into one preallocated key/value
buffer, with per-row position ids and an attention mask; rows of several groups share a batch of up
to `max_batch`. Outputs equal the naive one-request-at-a-time loop (`generate_naive`) in float32
(checked token for token by `benchmarks/transfer_prefix_cache.py`). In bfloat16 the rounding
differs between batch and prefill shapes enough to change greedy continuations (7 of 16 rollouts of
the first benchmark trace), and it is also slower on these CPUs (no fast bf16 matmul: naive decode
3.5 vs 7.4 tokens/s), so float32 is the default.

A request's `repetition_penalty` other than 1.0 is applied before every choice with the semantics of
transformers' `RepetitionPenaltyLogitsProcessor` (over the row's prompt ids and the tokens generated
so far, on float32 scores); with 1.0 and no sampling the logits go straight to argmax. A request with
`sampling` (teachers only) draws each token with transformers' temperature, top-k and top-p warpers
from its own `torch.Generator` seeded with `sampling.seed`, one draw per token, so its output does not
depend on batch mates or order and equals the naive path's.
"""

from __future__ import annotations

import os
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

from legival_core.backends._kv_cache import buffered_cache, crop, layer_kv
from legival_core.backends.base import (
    BackendInfo,
    ChatMessage,
    Completion,
    FinishReason,
    GenerationRequest,
    Sampling,
)
from legival_core.backends.prompt_format import render_chat_with, turn_end
from legival_core.catalog import SMOLLM2, canonical_model
from legival_core.registry import register

if TYPE_CHECKING:
    import torch

Dtype = Literal["float32", "bfloat16"]
DEFAULT_MAX_BATCH = 16
"""Rows decoded together (the `max_batch` option; `BackendInfo.max_batch` for the plan's cost model)."""


@dataclass(slots=True)
class _Row:
    """One request in flight: its prompt ids, what it has generated, and how it finished."""

    index: int
    request: GenerationRequest
    prompt_ids: list[int]
    prefill_computed: int = 0
    prefill_cached: int = 0
    generated: list[int] = field(default_factory=list)
    text: str = ""
    finish: FinishReason | None = None
    completion_tokens: int = 0
    kv: Any = None  # this row's key/values (one tensor pair per layer) between prefill and decode
    rng: Any = None  # the row's torch.Generator when it samples, created on its first draw

    @property
    def plain_greedy(self) -> bool:
        """Argmax of the raw logits: no repetition penalty, no sampling."""
        return self.request.repetition_penalty == 1.0 and self.request.sampling is None

    @property
    def prompt_len(self) -> int:
        return len(self.prompt_ids)

    def completion(self) -> Completion:
        assert self.finish is not None
        return Completion(
            request_id=self.request.request_id,
            text=self.text,
            prompt_tokens=self.prompt_len,
            completion_tokens=self.completion_tokens,
            finish_reason=self.finish,
            prefill_computed=self.prefill_computed,
            prefill_cached=self.prefill_cached,
        )


@dataclass(frozen=True, slots=True)
class _Plan:
    """A root prompt prefilled in full, and the rows served from its cache (row, common token prefix)."""

    root: _Row
    attached: tuple[tuple[_Row, int], ...]


def common_prefix_len(a: Sequence[int], b: Sequence[int]) -> int:
    n = min(len(a), len(b))
    i = 0
    while i < n and a[i] == b[i]:
        i += 1
    return i


class EmbeddedBackend:
    """`TextBackend` over a local transformers causal LM (SmolLM2-135M-Instruct by default)."""

    def __init__(
        self,
        model_dir: Path | str | None = None,
        dtype: Dtype = "float32",
        max_batch: int = DEFAULT_MAX_BATCH,
        cache_dir: Path | str | None = None,
        model_id: str | None = None,
        num_threads: int | None = None,
    ) -> None:
        os.environ.setdefault("HF_HUB_OFFLINE", "1")
        import torch
        from transformers import AutoModelForCausalLM, AutoTokenizer

        if dtype not in ("float32", "bfloat16"):
            raise ValueError(f"dtype must be 'float32' or 'bfloat16', got {dtype!r}")
        if max_batch < 1:
            raise ValueError(f"max_batch must be >= 1, got {max_batch}")
        if model_dir is None:
            from legival_core.backends.smollm2 import smollm2_safetensors_dir

            model_dir = smollm2_safetensors_dir(Path(cache_dir) if cache_dir is not None else None)
            model_id = model_id or SMOLLM2
        if num_threads is not None:
            torch.set_num_threads(num_threads)
        self._torch = torch
        self.model_dir = Path(model_dir)
        self.dtype: Dtype = dtype
        self.max_batch = max_batch
        started = time.perf_counter()
        self._tokenizer = AutoTokenizer.from_pretrained(self.model_dir)
        self._model = AutoModelForCausalLM.from_pretrained(
            self.model_dir, dtype=getattr(torch, dtype), attn_implementation="sdpa"
        ).eval()
        self.load_seconds = time.perf_counter() - started
        config = self._model.config
        self.model_id: str = model_id or self.model_dir.name
        self.context_length: int = int(config.max_position_embeddings)
        self._eos_ids = _eos_ids(self._model, self._tokenizer)
        self._turn_end = turn_end(self._tokenizer)

    @property
    def device(self) -> str:
        """What its speed depends on (`transfer_timings.device`): the CPU threads torch uses."""
        return f"cpu, {self._torch.get_num_threads()} threads"

    # ---- TextBackend -------------------------------------------------------------------------

    def render_chat(self, messages: Sequence[ChatMessage], continue_final_message: bool) -> str:
        return render_chat_with(self._tokenizer, messages, continue_final_message)

    def count_tokens(self, text: str) -> int:
        return len(self._encode(text))

    def generate(self, requests: Sequence[GenerationRequest]) -> list[Completion]:
        rows, pending = self._admit(requests)
        with self._torch.inference_mode():
            ready: list[_Row] = []
            for group in _groups(pending):
                for plan in _plan_group(group):
                    ready.extend(self._prefill(plan))
                while len(ready) >= self.max_batch:
                    self._decode(ready[: self.max_batch])
                    ready = ready[self.max_batch :]
            for start in range(0, len(ready), self.max_batch):
                self._decode(ready[start : start + self.max_batch])
        return [row.completion() for row in rows]

    def close(self) -> None:
        self._model = None

    # ---- reference path ----------------------------------------------------------------------

    def generate_naive(self, requests: Sequence[GenerationRequest]) -> list[Completion]:
        """One request at a time, prefilled from scratch, single-stream greedy decode: the
        reference the cached path must reproduce exactly."""
        torch = self._torch
        from transformers import DynamicCache

        rows, pending = self._admit(requests)
        with torch.inference_mode():
            for row in pending:
                row.prefill_computed = row.prompt_len
                cache = DynamicCache()
                ids = torch.tensor([row.prompt_ids])
                out = self._model(input_ids=ids, cache=cache, use_cache=True, logits_to_keep=1)
                token = self._pick(out.logits[0, -1], row)
                while not self._push(row, token):
                    out = self._model(
                        input_ids=torch.tensor([[token]]),
                        cache=cache,
                        use_cache=True,
                        logits_to_keep=1,
                    )
                    token = self._pick(out.logits[0, -1], row)
        return [row.completion() for row in rows]

    # ---- internals ---------------------------------------------------------------------------

    def _encode(self, text: str) -> list[int]:
        return list(self._tokenizer(text, add_special_tokens=False)["input_ids"])

    def _admit(self, requests: Sequence[GenerationRequest]) -> tuple[list[_Row], list[_Row]]:
        """Tokenize; overflowing prompts and zero-token budgets finish here without the model."""
        rows = [_Row(i, r, self._encode(r.prompt)) for i, r in enumerate(requests)]
        pending = []
        for row in rows:
            if row.prompt_len >= self.context_length:
                row.finish = "overflow"
            elif row.request.max_new_tokens <= 0:
                row.finish = "length"
            else:
                pending.append(row)
        return rows, pending

    def _pick(self, logits: torch.Tensor, row: _Row) -> int:
        """The next token from one row's next-token logits (1-D): its repetition penalty, then the
        greedy choice or a seeded draw."""
        torch = self._torch
        if row.plain_greedy:
            return int(logits.argmax())
        penalty = row.request.repetition_penalty
        if penalty == 1.0:
            scores = logits.to(dtype=torch.float32, copy=True)
        else:
            scores = _penalized(torch, logits, row.prompt_ids + row.generated, penalty)
        sampling = row.request.sampling
        if sampling is None:
            return int(scores.argmax())
        if row.rng is None:
            row.rng = torch.Generator().manual_seed(sampling.seed)
        return _sample(torch, scores, sampling, row.rng)

    def _push(self, row: _Row, token: int) -> bool:
        """Append one generated token; True when the row is finished. Shared by both paths so
        finishing rules cannot drift apart."""
        row.completion_tokens += 1
        if token in self._eos_ids:
            row.finish = "stop"
            return True
        row.generated.append(token)
        row.text = str(self._tokenizer.decode(row.generated, skip_special_tokens=True))
        rule = row.request.stop_rule
        end = row.text.find(self._turn_end) if self._turn_end else -1
        if end >= 0:
            row.text = row.text[:end]
            row.finish = "stop"
        elif rule is not None and rule(row.text):
            row.finish = "rule"
        elif (
            row.completion_tokens >= row.request.max_new_tokens
            or row.prompt_len + row.completion_tokens >= self.context_length
        ):
            row.finish = "length"
        return row.finish is not None

    def _prefill(self, plan: _Plan) -> list[_Row]:
        """Prefill the root once; return the rows that still need decoding, each with its first
        token generated and its own key/value prefix stored in `self._kv`."""
        torch = self._torch
        from transformers import DynamicCache

        root = plan.root
        full = [row for row, c in plan.attached if c == row.prompt_len]
        partial = [(row, c) for row, c in plan.attached if c < row.prompt_len]
        positions = sorted({root.prompt_len - 1} | {row.prompt_len - 1 for row in full})
        cache = DynamicCache()
        out = self._model(
            input_ids=torch.tensor([root.prompt_ids]),
            cache=cache,
            use_cache=True,
            logits_to_keep=torch.tensor(positions),
        )
        logits = out.logits[0]
        first_at = dict(zip(positions, logits.argmax(-1).tolist(), strict=True))
        kv = layer_kv(cache)
        root.prefill_computed = root.prompt_len
        ready: list[_Row] = []
        for row in [root, *full]:
            if row is not root:
                row.prefill_cached = row.prompt_len
            at = row.prompt_len - 1
            token = first_at[at] if row.plain_greedy else self._pick(logits[positions.index(at)], row)
            if not self._push(row, token):
                row.kv = crop(kv, row.prompt_len)
                ready.append(row)
        for row, c in partial:
            row.prefill_cached = c
            row.prefill_computed = row.prompt_len - c
            sub = DynamicCache(crop(kv, c))
            out = self._model(
                input_ids=torch.tensor([row.prompt_ids[c:]]),
                position_ids=torch.arange(c, row.prompt_len).unsqueeze(0),
                cache=sub,
                use_cache=True,
                logits_to_keep=1,
            )
            if not self._push(row, self._pick(out.logits[0, -1], row)):
                row.kv = layer_kv(sub)
                ready.append(row)
        return ready

    def _decode(self, batch: list[_Row]) -> None:
        """Greedy decode of rows that each hold their last generated token and the key/values of
        everything before it.

        Rows are left-padded into one preallocated buffer so every row writes its new token to the
        same column; finished rows are dropped together with the padding columns nobody needs any
        more, so the batch only ever computes live rows.
        """
        torch = self._torch
        kvs = [row.kv for row in batch]
        for row in batch:
            row.kv = None
        lens = [row.prompt_len + len(row.generated) - 1 for row in batch]
        budget = max(
            min(r.request.max_new_tokens, self.context_length - r.prompt_len) - r.completion_tokens
            for r in batch
        )
        cache = buffered_cache(kvs, lens, max(lens) + budget)
        mask = torch.zeros(len(batch), max(lens) + budget, dtype=torch.long)
        for i, n in enumerate(lens):
            mask[i, max(lens) - n : max(lens)] = 1
        live = list(range(len(batch)))
        per_row = not all(row.plain_greedy for row in batch)
        pos = torch.tensor(lens)
        while live:
            width = cache.get_seq_length()
            mask[:, width] = 1
            out = self._model(
                input_ids=torch.tensor([[batch[i].generated[-1]] for i in live]),
                position_ids=pos.unsqueeze(1),
                attention_mask=mask[:, : width + 1],
                cache=cache,
                use_cache=True,
            )
            pos += 1
            if per_row:
                nxt = [self._pick(out.logits[j, -1], batch[i]) for j, i in enumerate(live)]
            else:
                nxt = out.logits[:, -1].argmax(-1).tolist()
            keep = [j for j, i in enumerate(live) if not self._push(batch[i], nxt[j])]
            if len(keep) == len(live):
                continue
            live = [live[j] for j in keep]
            if not live:
                break
            idx = torch.tensor(keep)
            pad = mask[idx, : width + 1].argmax(-1)  # first valid column of each kept row
            left = int(pad.min())
            cache.select(idx, left)
            mask = mask[idx, left:].contiguous()
            pos = pos[idx]


def _penalized(torch: Any, logits: torch.Tensor, ids: list[int], penalty: float) -> torch.Tensor:
    """transformers' `RepetitionPenaltyLogitsProcessor` on one row: float32 scores where every id in
    `ids` has its score divided by `penalty` if positive, multiplied if negative (a copy)."""
    scores = logits.to(dtype=torch.float32, copy=True)
    index = torch.tensor(ids, dtype=torch.long)
    seen = scores.gather(0, index)
    scores.scatter_(0, index, torch.where(seen < 0, seen * penalty, seen / penalty))
    return scores


def _sample(torch: Any, scores: torch.Tensor, sampling: Sampling, rng: Any) -> int:
    """One draw with transformers' warpers in their order (temperature, top-k, top-p, each keeping at
    least one token) from float32 `scores` (modified in place)."""
    scores /= sampling.temperature
    if 0 < sampling.top_k < scores.numel():
        kth = torch.topk(scores, sampling.top_k).values[-1]
        scores[scores < kth] = -float("inf")
    if sampling.top_p < 1.0:
        ordered, index = torch.sort(scores, descending=False)
        cumulative = ordered.softmax(-1).cumsum(-1)
        drop = cumulative <= 1 - sampling.top_p
        drop[-1] = False
        scores[index[drop]] = -float("inf")
    return int(torch.multinomial(scores.softmax(-1), 1, generator=rng))


def _groups(rows: list[_Row]) -> Iterator[list[_Row]]:
    by_group: dict[str, list[_Row]] = {}
    for row in rows:
        by_group.setdefault(row.request.group, []).append(row)
    yield from by_group.values()


def _plan_group(rows: list[_Row]) -> list[_Plan]:
    """Longest prompts first; each row hangs off the root sharing its longest token prefix, or
    becomes a root itself when it shares nothing."""
    roots: list[tuple[_Row, list[tuple[_Row, int]]]] = []
    for row in sorted(rows, key=lambda r: -r.prompt_len):
        best, best_c = None, 0
        for root, attached in roots:
            c = common_prefix_len(root.prompt_ids, row.prompt_ids)
            if c > best_c:
                best, best_c = attached, c
        if best is None:
            roots.append((row, []))
        else:
            best.append((row, best_c))
    return [_Plan(root, tuple(attached)) for root, attached in roots]


def _eos_ids(model: Any, tokenizer: Any) -> frozenset[int]:
    ids: set[int] = set()
    for source in (model.generation_config.eos_token_id, model.config.eos_token_id, tokenizer.eos_token_id):
        if isinstance(source, int):
            ids.add(source)
        elif source is not None:
            ids.update(int(x) for x in source)
    return frozenset(ids)


@register("backend", "embedded", meta=BackendInfo(dtypes=("float32", "bfloat16"), max_batch=DEFAULT_MAX_BATCH))
def make_embedded_backend(model: str | None = None, dtype: str | None = None, **options: Any) -> EmbeddedBackend:
    """transformers on the CPU with shared-prefix KV reuse (default model: the shipped SmolLM2; any
    shipped model by name, e.g. Gemma 3 270M; otherwise a local model directory)."""
    if model is not None and "model_dir" not in options:
        from legival_core.backends.shipped import safetensors_dir, shipped_model

        shipped = shipped_model(model)
        if shipped is not None:
            cache_dir = options.get("cache_dir")
            options["model_dir"] = safetensors_dir(shipped, Path(cache_dir) if cache_dir is not None else None)
        else:
            options["model_dir"] = model
    if model is not None:
        options.setdefault("model_id", canonical_model(model))
    if dtype is not None:
        options.setdefault("dtype", dtype)
    return EmbeddedBackend(**options)
