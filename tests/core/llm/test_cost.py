"""`legival_core.llm.cost`: the estimate, computed by hand."""

from __future__ import annotations

import pytest

from legival_core.llm.cost import CostEstimate, Prices, estimate_calls


def test_estimate_calls_by_hand() -> None:
    # 4000 chars / 4 per token * 1.1 = 1100 input tokens; 2 calls * 2048 * 1.1 = 4505.6 -> 4506 output
    est = estimate_calls(4000, 2, Prices(1.0, 10.0, 0.5))
    assert (est.calls, est.input_tokens, est.output_tokens) == (2, 1100, 4506)
    assert est.usd == pytest.approx((1100 * 1.0 + 4506 * 10.0) / 1e6)
    assert estimate_calls(4000, 2, Prices(1.0, 10.0, 0.5), batch=True).usd == pytest.approx(est.usd / 2)
    assert estimate_calls(0, 0) == CostEstimate(0, 0, 0, 0.0)
    assert est.scaled(2.0) == CostEstimate(4, 2200, 9012, est.usd * 2)
