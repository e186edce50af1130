"""agreement.csv's monitors section (issue 48 part 4): two monitors' verdicts on the same samples, by hand
(the saturated case where kappa collapses and AC1 does not); unparsed verdicts are no label; one monitor
or none is a `not run` row naming what to do."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from legival_core.reports.compute.monitor_agreement import (
    NOT_RUN,
    ONE_MONITOR,
    monitor_agreement_table,
    schema,
)
from legival_core.store import Store


def _sample(i: int, teacher: str = "T") -> dict[str, Any]:
    return {"unit_key": f"{teacher}{i}", "teacher": teacher, "dataset": "gsm8k", "problem_id": f"p{i}",
            "cue": "sycophancy", "arm": 1, "sample": 0, "target": "7", "gold": "5", "question": "q", "prompt": "p",
            "reasoning": "r", "answer_text": "a", "extracted": "7", "hit_target": True, "correct": False,
            "finish_reason": "stop", "model": "m", "decoding": "{}"}


def _verdict(monitor: str, unit: str, verdict: bool | None) -> dict[str, Any]:
    return {"verdict_key": f"{monitor}:{unit}", "unit_key": unit, "monitor": monitor, "monitor_key": monitor,
            "cue": "sycophancy", "scope": "cot", "verdict": verdict, "status": "ok" if verdict is not None else
            "unparsed", "response": None}


def test_two_monitors_flagging_rarely_collapse_kappa_not_ac1(tmp_path: Path) -> None:
    with Store(tmp_path / "s.duckdb") as store:
        assert monitor_agreement_table(store, 0, 0)["status"].to_list() == [NOT_RUN]
        store.insert_rows("intervention_traces", [_sample(i) for i in range(11)])
        # a flags sample 0, b flags sample 1: raw 8/10; b's reply on sample 10 is garbage (no label)
        a = [_verdict("a", f"T{i}", i == 0) for i in range(11)]
        store.insert_rows("hint_verdicts", a)
        assert monitor_agreement_table(store, 0, 0)["status"].to_list() == [ONE_MONITOR]
        store.insert_rows("hint_verdicts", [_verdict("b", f"T{i}", i == 1 if i < 10 else None) for i in range(11)])
        table = monitor_agreement_table(store, 200, 1)
    assert list(table.schema) == list(schema())
    assert table["teacher"].to_list() == ["all", "T"]  # over all teachers first, then per teacher
    r = table.row(0, named=True)
    assert (r["monitor_a"], r["monitor_b"], r["n"]) == ("a", "b", 10)
    assert r["raw_agreement"] == pytest.approx(0.8)
    # pe = 0.9*0.9 + 0.1*0.1 = 0.82 -> kappa = (0.8 - 0.82) / 0.18; AC1: pi = (0.9, 0.1), pe = 0.18
    assert r["kappa"] == pytest.approx(-0.02 / 0.18) and r["gwet_ac1"] == pytest.approx(0.62 / 0.82)
    assert (r["max_prevalence_a"], r["max_prevalence_b"], r["saturated"]) == (0.9, 0.9, True)
    assert r["gwet_ac1_ci_low"] <= r["gwet_ac1"] <= r["gwet_ac1_ci_high"] and r["status"] == "computed"


def test_an_undefined_statistic_says_why(tmp_path: Path) -> None:
    with Store(tmp_path / "s.duckdb") as store:
        store.insert_rows("intervention_traces", [_sample(i) for i in range(4)])
        store.insert_rows("hint_verdicts", [_verdict(m, f"T{i}", False) for m in ("a", "b") for i in range(4)])
        r = monitor_agreement_table(store, 0, 0).row(0, named=True)
    assert r["raw_agreement"] == 1.0 and r["kappa"] is None and r["gwet_ac1"] == 1.0  # both never flag
    assert r["status"].startswith("computed; undefined: chance agreement 1")
