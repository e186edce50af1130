"""The scoring core's rules (legival_core/rl/score.py, docs/reward.md "The definition"), by hand on the
scripted student: values and reasons, the gate, an unavailable component, GSM8K's own answer column as
the gold, the log (one row per scored item, a retry logs nothing new, equal completions of one call
logged apart, refused items not logged)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from legival_core.rl.items import Item, ItemError, items_from_lists
from legival_core.rl.score import Scorer
from legival_core.run_config.reward import parse_reward_spec
from legival_core.store import Store
from legival_core.store.reward_log import reward_rows

Q = "Tom has 9 apples and buys 9 more. How many apples does he have?"
RIGHT = "He has 9. He buys 9 more. 9 + 9 = 18. The answer is \\boxed{18}."
STUDENT = {"name": "scripted-demo", "backend": "scripted-demo", "model": "scripted-demo-v1"}


def spec(**extra: Any) -> Any:
    return parse_reward_spec({"dataset": "gsm8k", "components": {
        "correct": {"weight": 1.0}, "format": {"weight": 0.5}, "length": {"weight": 0.25, "unit": "steps", "target": 2},
        "backtracking": {"weight": 0.25},
        "transfer": {"weight": 1.0, "student": STUDENT, "step_interval": 2, "max_new_tokens": 16}}, **extra})


def test_values_reasons_and_the_sum() -> None:
    scorer = Scorer(spec(), log=False)
    try:
        right, wrong, empty = scorer.score([Item(Q, RIGHT, "He buys 9.\n#### 18"), Item(Q, "So 20.", "18"), Item(Q, "", "18")])
    finally:
        scorer.close()
    c = right.components
    assert right.correct and c["correct"].value == 1.0 and c["format"].value == 1.0
    assert c["length"].raw == 4 and c["length"].value == pytest.approx(2 / 4)  # 4 steps over a target of 2
    assert c["backtracking"].value == 1.0 and c["transfer"].value is not None and c["transfer"].reason is None
    assert right.reward == pytest.approx(1.0 + 0.5 + 0.25 * 0.5 + 0.25 + c["transfer"].value)
    assert not wrong.correct and wrong.components["transfer"].reason.startswith("incorrect")  # SPEC §4
    assert wrong.components["format"].value == 0.0 and "no explicit answer" in wrong.components["format"].reason
    assert empty.components["correct"].reason == "no answer found (unparsed)"
    assert empty.components["length"].value == 1.0 and empty.components["length"].reason == "no reasoning"


def test_the_gate_and_an_unavailable_component(monkeypatch: pytest.MonkeyPatch) -> None:
    gated = Scorer(spec(combine={"gate_on_correct": True}), log=False)
    try:
        (wrong,) = gated.score([Item(Q, "It is 20, the answer is \\boxed{20}.", "18")])
    finally:
        gated.close()
    assert wrong.reward == 0.0 and wrong.components["format"].value == 1.0
    s = parse_reward_spec({"dataset": "gsm8k", "components": {"redundancy": {"weight": 1.0}}})
    scorer = Scorer(s, log=False)

    def broken(_sentences: Any) -> Any:
        raise FileNotFoundError("all-MiniLM-L6-v2 is not installed")
    monkeypatch.setattr(scorer, "_embed", broken)
    (got,) = scorer.score([Item(Q, RIGHT, "18")])
    assert got.reward is None and "unavailable" in (got.reason or "") and got.components["redundancy"].value is None


def test_the_log_holds_each_scored_item_once(tmp_path: Path) -> None:
    db = tmp_path / "r.duckdb"
    Store(db).close()
    scorer = Scorer(spec(store=str(db)))
    try:
        batch = items_from_lists([Q, Q, Q], [RIGHT, RIGHT, 5], ["18", "18", "18"], source="trl", limit=1000, step=3)
        first = scorer.score(batch)
        again = scorer.score(batch)  # a retried call
    finally:
        scorer.close()
    assert isinstance(batch[2], ItemError) and first[2].error and first[2].reward is None
    assert [r.reward for r in first] == [r.reward for r in again]
    with Store(db) as store:  # a writable open absorbs the journal
        rows = reward_rows(store)
    assert rows.height == 2 and rows["step"].to_list() == [3, 3]  # two equal completions: two samples
    assert set(rows["source"].to_list()) == {"trl"} and rows["correct"].to_list() == [True, True]
