"""What judging costs: the requests' prompts (system + user) priced by `llm.cost`, and the guard that
refuses a run above `max_cost_usd` before any paid call. Windowing of over-long traces repeats the
system prompt per window and is not modelled.
"""

from __future__ import annotations

from collections.abc import Sequence

from legival_core.judges.prompt import system_prompt, user_prompt
from legival_core.judges.records import JudgeRequest
from legival_core.llm.cost import DEFAULT_PRICES, CostEstimate, CostLimitExceeded, Prices, estimate_calls


def estimate_cost(
    requests: Sequence[JudgeRequest],
    prices: Prices = DEFAULT_PRICES,
    *,
    chars_per_token: float = 4.0,
    output_tokens_per_call: int = 2048,
    repair_rate: float = 0.10,
    include_question: bool = False,
    batch: bool = False,
) -> CostEstimate:
    """Estimated tokens and USD for judging `requests` once each (empty traces are not sent)."""
    chars = 0
    calls = 0
    for r in requests:
        if not r.steps:
            continue
        calls += 1
        q = r.question if include_question else None
        chars += len(system_prompt(r.dataset)) + len(user_prompt(r.steps, m=r.m, question=q))
    return estimate_calls(chars, calls, prices, chars_per_token=chars_per_token,
                          output_tokens_per_call=output_tokens_per_call, repair_rate=repair_rate, batch=batch)


def guard_cost(
    requests: Sequence[JudgeRequest],
    max_cost_usd: float,
    prices: Prices = DEFAULT_PRICES,
    *,
    chars_per_token: float = 4.0,
    output_tokens_per_call: int = 2048,
    repair_rate: float = 0.10,
    include_question: bool = False,
    batch: bool = False,
) -> CostEstimate:
    """Raise CostLimitExceeded when the estimate is above `max_cost_usd`; call before any paid call."""
    est = estimate_cost(
        requests,
        prices,
        chars_per_token=chars_per_token,
        output_tokens_per_call=output_tokens_per_call,
        repair_rate=repair_rate,
        include_question=include_question,
        batch=batch,
    )
    if est.usd > max_cost_usd:
        raise CostLimitExceeded(
            f"estimated judge cost ${est.usd:.4f} for {est.calls} calls (~{est.input_tokens} input, "
            f"~{est.output_tokens} output tokens) exceeds max_cost_usd=${max_cost_usd:.4f}; raise the "
            "limit or judge fewer traces"
        )
    return est
