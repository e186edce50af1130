"""Cost accounting of model calls: prices, an estimate from prompt characters, a spending limit.

Prices are USD per million tokens and configurable. Defaults are Gemini 2.5 Flash text rates,
$0.30 / M input and $2.50 / M output (output includes thinking tokens), the figures in the paper's
code (ippolito-cmu/legible_cot_preprint, src/scripts/analyze_backtracking.py). That file labels them
"batch" and doubles them for "standard"; Google's price list at the time of writing gives $0.30 /
$2.50 for standard calls and 50% off for the Batch API, so we treat them as standard and apply
`batch_multiplier` = 0.5 to batch jobs. Re-check the price list before a large run.

Tokens are estimated, not counted: prompt characters / chars_per_token for input, and a fixed
`output_tokens_per_call` (default 2048, the paper's fallback when it had no measured outputs). Both
are then scaled by (1 + repair_rate) (default 0.10, the paper's assumed reprocess rate). What the
prompts are is the caller's (`judges.cost` counts a judge's).
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class Prices:
    input_usd_per_million: float = 0.30
    output_usd_per_million: float = 2.50
    batch_multiplier: float = 0.5


DEFAULT_PRICES = Prices()


@dataclass(frozen=True, slots=True)
class CostEstimate:
    calls: int
    input_tokens: int
    output_tokens: int
    usd: float

    def scaled(self, factor: float) -> CostEstimate:
        """The estimate of a population `factor` times the size of the one estimated (a sample's)."""
        return CostEstimate(round(self.calls * factor), round(self.input_tokens * factor),
                            round(self.output_tokens * factor), self.usd * factor)


class CostLimitExceeded(RuntimeError):
    """The estimated cost of a run is above the configured maximum; nothing was sent."""


def estimate_calls(
    prompt_chars: int,
    calls: int,
    prices: Prices = DEFAULT_PRICES,
    *,
    chars_per_token: float = 4.0,
    output_tokens_per_call: int = 2048,
    repair_rate: float = 0.10,
    batch: bool = False,
) -> CostEstimate:
    """Estimated tokens and USD of `calls` calls whose prompts hold `prompt_chars` characters in all."""
    scale = 1.0 + repair_rate
    tin = round(prompt_chars / chars_per_token * scale)
    tout = round(calls * output_tokens_per_call * scale)
    usd = (tin * prices.input_usd_per_million + tout * prices.output_usd_per_million) / 1e6
    if batch:
        usd *= prices.batch_multiplier
    return CostEstimate(calls, tin, tout, usd)
