from __future__ import annotations

import numpy as np
import pytest

from legival_core.metrics.backtracking import (
    backtracking_fraction,
    lexical_backtracking,
    lexical_backtracking_steps,
)
from legival_core.metrics.redundancy import (
    SWEEP_THRESHOLDS,
    max_prev_similarity,
    redundancy,
    redundancy_sweep,
)
from legival_core.segment import segment
from legival_core.token_count import token_len


def _unit(*v: float) -> np.ndarray:
    a = np.array(v, dtype=np.float32)
    return a / np.linalg.norm(a)


def test_max_prev_similarity_by_hand() -> None:
    # e1 = x, e2 = y (cos(e2,e1) = 0), e3 = (x+y)/sqrt2 (cos with e1 and e2 = 0.7071), e4 = x (cos e1 = 1)
    e = np.stack([_unit(1, 0), _unit(0, 1), _unit(1, 1), _unit(1, 0)])
    r = max_prev_similarity(e)
    assert r == pytest.approx([0.0, 0.70710678, 1.0], abs=1e-6)
    # tau = 0.8: only step 4 is redundant -> 1 / (m - 1) = 1/3
    assert redundancy(r, 0.8) == pytest.approx(1 / 3)
    # tau = 0.5: steps 3 and 4 -> 2/3; strict '>' so r = 1.0 is not > 1.0
    assert redundancy(r, 0.5) == pytest.approx(2 / 3)
    assert redundancy(r, 1.0) == 0.0


def test_redundancy_is_zero_below_two_steps() -> None:
    assert max_prev_similarity(np.stack([_unit(1, 0)])) == []
    assert redundancy([], 0.8) == 0.0


def test_sweep_has_21_thresholds_and_is_monotone() -> None:
    assert len(SWEEP_THRESHOLDS) == 21
    assert SWEEP_THRESHOLDS[0] == 0.0 and SWEEP_THRESHOLDS[-1] == 1.0 and SWEEP_THRESHOLDS[16] == 0.8
    sweep = redundancy_sweep([0.1, 0.55, 0.85, 0.95])
    assert sweep[0] == 1.0  # every r > 0.0
    assert sweep[10] == 0.75  # r > 0.5: 0.55, 0.85, 0.95
    assert sweep[16] == 0.5  # r > 0.8
    assert sweep[20] == 0.0
    assert all(a >= b for a, b in zip(sweep, sweep[1:], strict=False))


def test_lexical_backtracking_counts_cues_at_step_start() -> None:
    text = (
        "Add 3 and 4 to get 7. Wait, the problem says 5. **Hmm**, so 3 + 5 = 8. "
        "The answer is not what I said, however. Actually it is 8. Going back to the start, fine."
    )
    s = segment(text)
    assert s.m == 6
    # steps 2 (Wait), 3 (**Hmm**), 5 (Actually), 6 (Going back); step 4 has "however" mid-sentence
    assert lexical_backtracking_steps(s) == (2, 3, 5, 6)
    assert lexical_backtracking(s) == pytest.approx(4 / 6)
    assert lexical_backtracking(segment("")) == 0.0


def test_backtracking_fraction_counts_distinct_in_range() -> None:
    assert backtracking_fraction([1, 1, 3, 9, 0], 4) == pytest.approx(2 / 4)
    assert backtracking_fraction([], 0) == 0.0


def test_token_len_cl100k_and_special_tokens_as_text() -> None:
    assert token_len("hello world") == 2
    assert token_len("") == 0
    # "<|endoftext|>" is counted as plain text (several tokens), never as the special token (1)
    assert token_len("<|endoftext|>") > 1
