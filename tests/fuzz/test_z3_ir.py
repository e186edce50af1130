"""Fuzzing the Z3 IR parser (`legival_core/quality/z3_ir.py` `parse_ir`): the JSON an LLM writes, or a
published file holds, is untrusted.

Any JSON-like object -> an `IR` or `IRValidationError`, strict or lenient; never another exception
(the explicit examples raised `ValueError` from `repr` of a 5,000-digit integer and `RecursionError`
on a deeply nested operand). Output invariants: lenient keeps one step per input step; a strict IR
has no skipped step, equals the lenient one, and round-trips through `to_dict` and JSON.
"""

from __future__ import annotations

import json
from typing import Any

import pytest
from hypothesis import example, given
from hypothesis import strategies as st

from legival_core.quality.z3_ir import ARITH_OPS, IR, STEP_OPS, IRValidationError, SkippedStep, parse_ir
from tests.conftest import FIXTURES, SHARED_DATA
from tests.fuzz._text import ANY_CHAR
from tests.fuzz._values import BIG, huge, mutated
from tests.fuzz.conftest import fuzz

pytestmark = pytest.mark.timeout(120, method="thread")

KEYS = ("variables", "steps", "name", "type", "track", "op", "var", "value", "arith", "kind", "expr",
        "lhs", "rhs", "left", "right", "const")

NAMES = st.one_of(st.sampled_from(("x", "y", "final_answer", "")), st.text(alphabet=ANY_CHAR, max_size=6))
NUMBERS = st.one_of(st.integers(), st.sampled_from((1, -1)).map(huge), st.sampled_from((10**400, 2**63)),
                    st.floats(allow_nan=True, allow_infinity=True), st.sampled_from(("3", "1e400", "nan", "x", "")),
                    st.booleans())
LEAVES = st.one_of(st.none(), NUMBERS, NAMES, st.sampled_from((*STEP_OPS, *ARITH_OPS, "Int", "Real", "s1")))
JSON = st.recursive(
    LEAVES,
    lambda inner: st.one_of(
        st.lists(inner, max_size=4),
        st.dictionaries(st.one_of(st.sampled_from(KEYS), st.text(alphabet=ANY_CHAR, max_size=4)), inner, max_size=5),
    ),
    max_leaves=25,
)
"""Arbitrary JSON-like values, biased towards the IR's own keys and values."""

OPERAND = st.recursive(
    st.one_of(st.builds(lambda n: {"var": n}, NAMES), st.builds(lambda c: {"const": c}, NUMBERS)),
    lambda inner: st.builds(lambda op, left, right: {"op": op, "left": left, "right": right},
                            st.sampled_from(ARITH_OPS), inner, inner),
    max_leaves=8,
)
STEP = st.one_of(
    st.builds(lambda t, v, x: {"track": t, "op": "set", "var": v, "value": x}, NAMES, NAMES, NUMBERS),
    st.builds(lambda t, v, k, x: {"track": t, "op": "update", "var": v, "arith": {"kind": k, "value": x}},
              NAMES, NAMES, st.sampled_from(ARITH_OPS), NUMBERS),
    st.builds(lambda t, v, e, lhs: {"track": t, "op": "set_expr", **({"lhs": {"var": v}} if lhs else {"var": v}),
                                    "expr": e}, NAMES, NAMES, OPERAND, st.booleans()),
    st.builds(lambda t, op, a, b: {"track": t, "op": op, "lhs": a, "rhs": b},
              NAMES, st.sampled_from(("assert_eq", "assert_ge", "assert_le")), OPERAND, OPERAND),
    st.builds(lambda t, op, v, x: {"track": t, "op": op, "var": v, "value": x},
              NAMES, st.sampled_from(("assert_eq", "assert_ge", "assert_le")), NAMES, NUMBERS),
)
NEAR_VALID = st.builds(
    lambda variables, steps: {"variables": variables, "steps": steps},
    st.lists(st.builds(lambda n, t: {"name": n, "type": t}, NAMES, st.sampled_from(("Int", "Real", "int", None))),
             max_size=4),
    st.lists(STEP, max_size=6),
)
"""IRs of the published shape, whose names and numbers are anything."""


def _fixture_irs() -> list[dict[str, Any]]:
    """The published IRs: the test fixture, and the 80 reference IRs when ../shared/data is there."""
    files = [FIXTURES / "z3" / "human_eval_gsm8k_acs_sample.jsonl",
             SHARED_DATA / "reasoning_traces" / "gsm8k_md_eval_cot_human_eval_subset" / "z3_acs_reference.jsonl"]
    out = []
    for path in files:
        if path.is_file():
            out += [json.loads(line)["ir"] for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]
    return out


FIXTURE_IRS = _fixture_irs()


def _fixture_ir(i: int) -> dict[str, Any]:
    return FIXTURE_IRS[i]


def _deep_operand(depth: int) -> dict[str, Any]:
    node: dict[str, Any] = {"var": "x"}
    for _ in range(depth):
        node = {"op": "add", "left": node, "right": {"const": 1}}
    return node


def check_parse(obj: Any) -> None:
    results: dict[bool, IR | IRValidationError] = {}
    for lenient in (False, True):
        try:
            results[lenient] = parse_ir(obj, lenient=lenient)
        except IRValidationError as e:
            assert isinstance(e.path, str) and isinstance(e.message, str) and str(e)
            results[lenient] = e
    strict, lenient_ir = results[False], results[True]
    if isinstance(lenient_ir, IR) and isinstance(obj, dict) and isinstance(obj.get("steps"), list):
        assert len(lenient_ir.steps) == len(obj["steps"])
    if isinstance(strict, IR):
        assert strict == lenient_ir
        assert not any(isinstance(s, SkippedStep) for s in strict.steps)
        assert len({v.name for v in strict.variables}) == len(strict.variables)
        assert parse_ir(strict.to_dict()) == strict
        assert parse_ir(json.loads(json.dumps(strict.to_dict()))) == strict


@fuzz(150)
@given(obj=st.one_of(JSON, NEAR_VALID, mutated(NEAR_VALID, JSON)))
@example(obj={"steps": [{"track": "s", "op": "set", "var": "x", "value": "\ud800"}]})
@example(obj={"variables": [{"name": "x"}, {"name": "x"}], "steps": [None, {"track": "s", "op": "set", "var": "x"}]})
def test_any_object_parses_or_raises_ir_validation_error(obj: Any) -> None:
    check_parse(obj)


# Examples that found bugs, as plain tests: Hypothesis cannot print them (that is the bug's cause).
FOUND: dict[str, dict[str, Any]] = {
    "a 5,000-digit operand": {"steps": [{"track": "s", "op": "assert_eq", "lhs": BIG, "rhs": {"var": "x"}}]},  # ValueError
    "a list holding one": {"steps": [{"track": "s", "op": "set", "var": "x", "value": [BIG]}]},  # AttributeError
    "a 5,000-digit name": {"variables": [{"name": BIG}]},  # ValueError
    "a 5,000-digit step": {"steps": [BIG]},  # ValueError
    "a 5,000-deep expression": {"steps": [{"track": "s", "op": "set_expr", "var": "y", "expr": _deep_operand(5000)}]},
    "a 3,000-deep assert side": {"steps": [{"track": "s", "op": "assert_eq", "lhs": _deep_operand(3000),
                                            "rhs": {"const": 1}}]},  # RecursionError
}


@pytest.mark.parametrize("name", FOUND)
def test_inputs_that_raised_other_errors_raise_ir_validation_error(name: str) -> None:
    with pytest.raises(IRValidationError) as info:
        parse_ir(FOUND[name])
    assert str(info.value)
    try:  # lenient: a step it cannot read is skipped; a bad declaration or a too deep operand still raises
        ir = parse_ir(FOUND[name], lenient=True)
    except IRValidationError as e:
        assert e.path.startswith("variables") or "nested too deeply" in e.message
    else:
        assert isinstance(ir.steps[0], SkippedStep) and ir.steps[0].reason


@pytest.mark.skipif(not FIXTURE_IRS, reason="no IR fixture")
@fuzz(120)
@given(data=st.data())
def test_mutated_published_irs_parse_or_raise_ir_validation_error(data: st.DataObject) -> None:
    check_parse(data.draw(mutated(st.integers(0, len(FIXTURE_IRS) - 1).map(_fixture_ir), JSON)))


def test_published_irs_parse_as_before() -> None:
    """The published IRs nest operands at most 3 deep, far inside MAX_OPERAND_DEPTH: all still parse."""
    assert FIXTURE_IRS
    for obj in FIXTURE_IRS:
        check_parse(obj)
        parse_ir(obj, lenient=True)


def test_operands_nested_within_the_limit_still_parse() -> None:
    from legival_core.quality.z3_ir import MAX_OPERAND_DEPTH

    ok = {"variables": [{"name": "x"}, {"name": "y"}],
          "steps": [{"track": "s1", "op": "set_expr", "var": "y", "expr": _deep_operand(MAX_OPERAND_DEPTH)}]}
    check_parse(ok)
    assert isinstance(parse_ir(ok), IR)
    too_deep = {"steps": [{"track": "s1", "op": "set_expr", "var": "y", "expr": _deep_operand(MAX_OPERAND_DEPTH + 2)}]}
    for lenient in (False, True):
        with pytest.raises(IRValidationError, match="nested too deeply"):
            parse_ir(too_deep, lenient=lenient)
