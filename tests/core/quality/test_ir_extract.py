"""Automatic IR extraction from trace text, and its agreement with the authors' hand-made IRs."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from legival_core.quality.ir_extract import (
    compare_with_published,
    extract_ir,
    final_answer_from_text,
    normalize,
)
from legival_core.quality.z3_ir import parse_ir
from legival_core.quality.z3_verify import verify_ir
from tests.conftest import FIXTURES, REPO

FIXTURE = FIXTURES / "z3" / "human_eval_gsm8k_acs_sample.jsonl"
SHARED = REPO.parent / "shared"
REFERENCE = (
    SHARED / "data" / "reasoning_traces" / "gsm8k_md_eval_cot_human_eval_subset" / "z3_acs_reference.jsonl"
)


def load(path: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]


def steps_of(text: str) -> list[dict[str, Any]]:
    ir = extract_ir(text)
    assert ir is not None
    return ir.to_dict()["steps"]


def test_normalize() -> None:
    assert normalize("1,000 × $18 ÷ 3 − 2") == "1000 * 18 / 3 - 2"
    assert "3 * 7" in normalize(r"\(3 \times 7 = 21\)")
    assert "((1)/(2))" in normalize(r"\frac{1}{2}")
    assert "(20/100) *" in normalize("20% of 50")
    assert "9 * 2 = 18" in normalize(r"9 \text{ eggs} \times \$2/\text{egg} = \$18")
    assert "3 * 16 = 48" in normalize("3 times 16 is 48")


def test_chain_with_calculator_annotations() -> None:
    steps = steps_of("16-3-4=<<16-3-4=9>>9 eggs. 9*2=<<9*2=18>>18 dollars\n#### 18")
    assert steps == [
        {
            "track": "s1",
            "op": "set_expr",
            "var": "v1",
            "expr": {"op": "sub", "left": {"const": 16}, "right": {"const": 3}},
        },
        {
            "track": "s2",
            "op": "set_expr",
            "var": "v2",
            "expr": {"op": "sub", "left": {"var": "v1"}, "right": {"const": 4}},
        },
        {"track": "s3", "op": "assert_eq", "lhs": {"var": "v2"}, "rhs": {"const": 9}},
        # 9 is the stated result of the previous chain: it becomes a reference to v2
        {
            "track": "s4",
            "op": "set_expr",
            "var": "v3",
            "expr": {"op": "mul", "left": {"var": "v2"}, "right": {"const": 2}},
        },
        {"track": "s5", "op": "assert_eq", "lhs": {"var": "v3"}, "rhs": {"const": 18}},
        {
            "track": "s6",
            "op": "set_expr",
            "var": "final_answer",
            "expr": {"op": "mul", "left": {"var": "v3"}, "right": {"const": 1}},
        },
        {"track": "s7", "op": "assert_eq", "lhs": {"var": "final_answer"}, "rhs": {"const": 18}},
    ]
    ir = extract_ir("16 - 3 - 4 = 9, then 9 * 2 = 18. She makes $18.")
    assert ir is not None and ir.to_dict()["steps"] == steps
    r = verify_ir(ir)
    assert (r.status, r.acs, r.fas0, r.answer) == ("sat", 1.0, 1.0, 18)
    assert r.shortcut_tracks == ("s5", "s7")


def test_multi_member_chain_precedence_and_labels() -> None:
    steps = steps_of("4(12) + 12 = 48 + 12 = 60")
    assert [s["op"] for s in steps] == ["set_expr"] * 3 + ["assert_eq"] * 2 + ["set_expr", "assert_eq"]
    assert steps[3] == {"track": "s4", "op": "assert_eq", "lhs": {"var": "v2"}, "rhs": {"var": "v3"}}
    ir = extract_ir("Total = 1,000 + 2,500 = 3,500. Then 3500 × 2 = 7000 and 7000 ÷ 4 = 1750. \\boxed{1750}")
    assert ir is not None
    assert {v.type for v in ir.variables} == {"Real"}  # a division makes every variable Real
    d = ir.to_dict()["steps"]
    assert d[0]["var"] == "total" and d[2]["expr"]["left"] == {"var": "total"}
    assert verify_ir(ir).fas0 == 1.0


def test_named_variables() -> None:
    ir = extract_ir("Let x = 5. Then 3x + 2 = 17. The answer is 17.")
    assert ir is not None
    d = ir.to_dict()["steps"]
    assert d[0]["op"] == "set" and d[0]["value"] == 5
    assert d[1]["expr"] == {"op": "mul", "left": {"const": 3}, "right": {"var": d[0]["var"]}}
    assert verify_ir(ir).fas0 == 1.0


def test_wrong_arithmetic_is_caught() -> None:
    ir = extract_ir("3 * 7 = 22. Then 22 + 12 = 34. Answer: 34")
    assert ir is not None
    r = verify_ir(ir)
    assert r.status == "unsat" and r.acs is not None and r.acs < 1.0


def test_round_trip_and_none() -> None:
    for text in (
        "3 * 16 = 48. 3 * 6 = 18. 48 + 18 = 66. \\boxed{66}",
        "10% of 1300 = 130. 1300 + 130 = 1430",
    ):
        ir = extract_ir(text)
        assert ir is not None
        assert parse_ir(ir.to_dict()) == ir
        assert parse_ir(json.loads(json.dumps(ir.to_dict()))) == ir
    assert extract_ir("") is None
    assert extract_ir("Ann is 9, her brother is twice her age, so 18.") is None
    assert final_answer_from_text("so \\boxed{1,750} dollars") == 1750.0


def _report(records: list[dict[str, Any]]) -> dict[str, Any]:
    report = compare_with_published(records)
    summary = {k: v for k, v in report.items() if k != "rows"}
    print("\nIR extraction vs published IRs:", summary)
    assert report["n"] == len(records) == len(report["rows"])
    assert 0 <= report["extracted"] <= report["n"]
    assert report["success_rate"] > 0
    assert 0 <= report["fas0_agree"] <= report["fas0_comparable"] <= report["extracted"]
    assert report["fas0_agreement"] is None or 0.0 <= report["fas0_agreement"] <= 1.0
    return report


def test_compare_with_published_fixture() -> None:
    report = _report(load(FIXTURE))
    # measured 2026-12: 5/5 extracted, FAS0 agrees with the authors' IR on 3/5
    assert report["extracted"] == 5 and report["fas0_agree"] >= 3


@pytest.mark.shared
def test_compare_with_published_all_80() -> None:
    """Agreement of the automatic extractor with the authors' hand-made IRs on all 80 published
    records. Measured 2026-12: 65/80 extracted (0.8125); FAS0 defined on both sides for those 65 and
    equal on 48 (0.738; every agreement is a sound trace; 12 records the authors' IR finds unsound are
    sound on ours, 5 the other way); ACS equal on 59/65, the predicted answer on 50/65. The bounds
    sit a little under the measured values so an extractor change that loses ground fails here."""
    if not REFERENCE.is_file():
        pytest.skip("needs ../shared/data (absent)")
    report = _report(load(REFERENCE))
    assert report["n"] == 80
    assert report["success_rate"] >= 0.78
    assert report["fas0_comparable"] >= 60
    assert report["fas0_agreement"] >= 0.70
    assert report["fas0_agreement_over_all"] >= 0.56
    rows = [r for r in report["rows"] if r["extracted"]]
    assert sum(r["acs_published"] == r["acs_extracted"] for r in rows) / len(rows) >= 0.85
