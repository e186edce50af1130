"""Z3 logical verification (gCoT paper): IR parsing, the metrics on hand-built IRs, and the
reproduction of the authors' published values."""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

import pytest

from legival_core.quality.z3_ir import (
    IR,
    AssertStep,
    IRValidationError,
    SetExprStep,
    SkippedStep,
    parse_ir,
)
from legival_core.quality.z3_verify import (
    bridge_variables,
    detect_shortcuts,
    predicted_answer,
    sound_only,
    verify_ir,
    verify_records,
)
from tests.conftest import FIXTURES, REPO

FIXTURE = FIXTURES / "z3" / "human_eval_gsm8k_acs_sample.jsonl"
SHARED = REPO.parent / "shared"
REFERENCE = (
    SHARED / "data" / "reasoning_traces" / "gsm8k_md_eval_cot_human_eval_subset" / "z3_acs_reference.jsonl"
)


def v(name: str) -> dict[str, Any]:
    return {"var": name}


def c(value: float) -> dict[str, Any]:
    return {"const": value}


def ir_of(steps: list[dict[str, Any]], names: str, vtype: str = "Int") -> dict[str, Any]:
    return {"variables": [{"name": n, "type": vtype} for n in names.split()], "steps": steps}


def se(track: str, var: str, op: str, left: dict[str, Any], right: dict[str, Any]) -> dict[str, Any]:
    return {"track": track, "op": "set_expr", "var": var, "expr": {"op": op, "left": left, "right": right}}


def st(track: str, var: str, value: float | str) -> dict[str, Any]:
    return {"track": track, "op": "set", "var": var, "value": value}


def eq(track: str, lhs: dict[str, Any], rhs: dict[str, Any], op: str = "assert_eq") -> dict[str, Any]:
    return {"track": track, "op": op, "lhs": lhs, "rhs": rhs}


# a=3, b=4, c=a*b, c==12, final=c*1, final==12: consistent, both asserts are shortcuts
SHORTCUT_IR = ir_of(
    [
        st("s1", "a", 3),
        st("s2", "b", 4),
        se("s3", "c", "mul", v("a"), v("b")),
        eq("s4", v("c"), c(12)),
        se("s5", "final_answer", "mul", v("c"), c(1)),
        eq("s6", v("final_answer"), c(12)),
    ],
    "a b c final_answer",
)

# a=3, b=5, c=a+b, c==9 (wrong), d=100 (irrelevant), final=c*1: unsat with core {s1..s4}
UNSAT_IR = ir_of(
    [
        st("s1", "a", 3),
        st("s2", "b", 5),
        se("s3", "c", "add", v("a"), v("b")),
        eq("s4", v("c"), c(9)),
        st("s5", "d", 100),
        se("s6", "final_answer", "mul", v("c"), c(1)),
    ],
    "a b c d final_answer",
)

# two derivations of 6: c=a*b and d=b*2 tied by c==d; the answer flows through d
REDUNDANT_IR = ir_of(
    [
        st("s1", "a", 2),
        st("s2", "b", 3),
        se("s3", "c", "mul", v("a"), v("b")),
        se("s4", "d", "mul", v("b"), c(2)),
        eq("s5", v("c"), v("d")),
        se("s6", "final_answer", "mul", v("d"), c(1)),
        eq("s7", v("final_answer"), c(6)),
    ],
    "a b c d final_answer",
)


def load(path: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]


# --------------------------------------------------------------------------- parsing


def test_parse_round_trip() -> None:
    for obj in (SHORTCUT_IR, UNSAT_IR, REDUNDANT_IR):
        ir = parse_ir(obj)
        assert ir.to_dict() == obj
        assert parse_ir(ir.to_dict()) == ir


@pytest.mark.parametrize(
    ("steps", "variables", "where"),
    [
        ([{"track": "s1", "op": "set_expr", "var": "x"}], [], "steps[0] (track 's1').expr"),
        ([st("s1", "x", 1), {"track": "s2", "op": "mul", "var": "x"}], [], "steps[1] (track 's2').op"),
        ([st("s1", "x", "abc")], [], "steps[0] (track 's1').value"),
        ([{"op": "set", "var": "x", "value": 1}], [], "steps[0].track"),
        ([se("s1", "x", "pow", v("a"), c(2))], [], "steps[0] (track 's1').expr.op"),
        ([se("s1", "x", "add", {"foo": 1}, c(2))], [], "steps[0] (track 's1').expr.left"),
        ([eq("s1", v("x"), c(1))], [{"name": "x", "type": "Float"}], "variables[0].type"),
        ([eq("s1", c(1), c(1))], [], "steps[0] (track 's1').lhs"),
    ],
)
def test_parse_errors_name_step_and_field(steps: list[Any], variables: list[Any], where: str) -> None:
    with pytest.raises(IRValidationError) as info:
        parse_ir({"variables": variables, "steps": steps})
    assert info.value.path == where
    assert str(info.value).startswith(where + ": ")


def test_parse_lenient_keeps_skipped_steps() -> None:
    obj = ir_of([st("s1", "x", 1), {"track": "s2", "op": "set_expr", "var": "y", "rhs": v("x")}], "x y")
    ir = parse_ir(obj, lenient=True)
    assert isinstance(ir.steps[1], SkippedStep)
    assert ir.steps[1].bumps is None and "expr" in ir.steps[1].reason
    bad = ir_of([se("s1", "y", "add", v("x"), {"op": "add", "left": c(1)})], "x y")
    skipped = parse_ir(bad, lenient=True).steps[0]
    assert isinstance(skipped, SkippedStep) and skipped.bumps == "y"  # their code bumped y first
    with pytest.raises(IRValidationError):
        parse_ir({"variables": "x", "steps": []}, lenient=True)


def test_parse_variants() -> None:
    ir = parse_ir(
        {
            "variables": [],
            "steps": [
                {
                    "track": "s1",
                    "op": "set_expr",
                    "lhs": v("y"),
                    "expr": {"op": "add", "left": c(1), "right": c(2)},
                },
                {"track": "s2", "op": "assert_eq", "var": "y", "value": 3},
                se("s3", "z", "add", {"op": "mul", "left": v("y"), "right": c(2)}, c(1)),
            ],
        }
    )
    assert isinstance(ir.steps[0], SetExprStep) and ir.steps[0].target_field == "lhs"
    assert isinstance(ir.steps[1], AssertStep) and ir.steps[1].form == "var_value"
    assert parse_ir(ir.to_dict()) == ir


# --------------------------------------------------------------------------- metrics


def test_sat_with_shortcuts() -> None:
    ir = parse_ir(SHORTCUT_IR)
    r = verify_ir(ir)
    assert r.status == "sat" and r.acs == 1.0 and r.unsat_core == ()
    assert r.answer == 12
    assert bridge_variables(ir) == {"final_answer", "c"}
    assert r.shortcut_tracks == ("s4", "s6") and r.dal == 1
    # without s4/s6 the four steps s1,s2,s3,s5 still force final_answer == 12, and all are needed
    assert r.fas0 == 1.0
    assert r.jss == pytest.approx(4 / 4)
    assert r.rcr == 0.0 and r.redundant_tracks == ()
    assert r.ear == 1.0 and r.acs_t == 1.0  # each assert is implied by the other steps
    assert verify_ir(ir, dialect="repo").ear == 0.0  # [repo] skips the negated assert: degenerate
    assert r.tracks == ("s1", "s2", "s3", "s4", "s5", "s6")
    assert r.constraints.startswith("[Implies(s1, a@1 == 3),")


def test_unsat_core_and_vacuous_fas0() -> None:
    ir = parse_ir(UNSAT_IR)
    r = verify_ir(ir)
    assert r.status == "unsat"
    assert r.unsat_core == ("s1", "s2", "s3", "s4")
    assert r.acs == pytest.approx(1 - 4 / 6)
    assert r.answer is None and r.fas0 is None and r.jss is None and r.rcr is None and r.dal == 0
    assert r.ear == 0.0 and r.acs_t == 0.0  # c != 9 is satisfiable with the rest
    # with an answer given, inconsistent steps "force" anything (the authors' definition)
    r8 = verify_ir(ir, answer=8)
    assert r8.fas0 == 1.0
    assert r8.justification == ("s1", "s2", "s3", "s4") and r8.jss == pytest.approx(4 / 6)
    # dropping s4 leaves a consistent set that computes c = 8 = final_answer; dropping s5 or s6 leaves
    # it inconsistent; dropping s1, s2 or s3 frees c
    assert r8.redundant_tracks == ("s4", "s5", "s6") and r8.rcr == pytest.approx(3 / 6)


def test_redundancy() -> None:
    r = verify_ir(parse_ir(REDUNDANT_IR))
    assert r.acs == 1.0 and r.answer == 6
    assert r.shortcut_tracks == ("s7",)  # c, d are bridges but never equated to the constant 6
    assert r.fas0 == 1.0
    # b=3 -> d=6 -> final=6 is the minimal justification; a, c and c==d are redundant, and so is d=b*2
    # because c==d with c=6 pins d
    assert r.redundant_tracks == ("s1", "s3", "s4", "s5")
    assert r.rcr == pytest.approx(4 / 6)
    assert r.jss is not None and 3 / 6 <= r.jss <= 1.0
    assert set(r.justification) >= {"s2", "s6"}


def test_fas0_zero_when_answer_is_only_stated() -> None:
    obj = ir_of([st("s1", "a", 5), eq("s2", v("final_answer"), c(40))], "a final_answer")
    r = verify_ir(parse_ir(obj))
    assert r.answer == 40 and r.shortcut_tracks == ("s2",)
    assert r.fas0 == 0.0 and r.jss is None and r.rcr == 0.0  # [repo]: RCR computed on an unsound trace
    assert sound_only(r) == (None, None)  # the paper: JSS and RCR exist only where FAS0 = 1


def test_jss_and_rcr_are_kept_on_a_sound_trace_only() -> None:
    sound = verify_ir(parse_ir(REDUNDANT_IR))
    assert sound_only(sound) == (sound.jss, pytest.approx(4 / 6))
    vacuous = verify_ir(parse_ir(UNSAT_IR))  # no answer: FAS0 undefined, so are JSS and RCR
    assert vacuous.fas0 is None and sound_only(vacuous) == (None, None)
    forced = verify_ir(parse_ir(UNSAT_IR), answer=8)
    assert forced.fas0 == 1.0 and sound_only(forced) == (pytest.approx(4 / 6), pytest.approx(3 / 6))


def test_answer_from_text_fallback() -> None:
    obj = ir_of([st("s1", "a", 5), se("s2", "final_answer", "add", v("a"), c(2))], "a final_answer")
    ir = parse_ir(obj)
    assert predicted_answer(ir) is None
    assert predicted_answer(ir, "so the answer is 7.") == 7
    assert verify_ir(ir, fallback_text="#### 7").fas0 == 1.0
    assert verify_ir(ir, fallback_text="#### 8").fas0 == 0.0
    assert detect_shortcuts(ir, None) == frozenset()


def test_ssa_update_division_and_quirks() -> None:
    upd = ir_of(
        [
            st("s1", "x", 10),
            {"track": "s2", "op": "update", "var": "x", "arith": {"kind": "sub", "value": 4}},
            eq("s3", v("x"), c(6)),
        ],
        "x",
    )
    r = verify_ir(parse_ir(upd))
    assert r.status == "sat" and "x@2 == x@1 - 4" in r.constraints
    int_div = ir_of([st("s1", "a", 7), se("s2", "q", "div", v("a"), c(2)), eq("s3", v("q"), c(3))], "a q")
    assert verify_ir(parse_ir(int_div)).status == "sat"  # Int / Int is integer division
    real_div = ir_of(
        [st("s1", "a", 7), se("s2", "q", "div", v("a"), c(2)), eq("s3", v("q"), c(3.5))], "a q", "Real"
    )
    assert verify_ir(parse_ir(real_div)).status == "sat"
    # [repo] bumps the target before reading the operands: x = x + 1 reads the new x
    selfref = ir_of([st("s1", "x", 1), se("s2", "x", "add", v("x"), c(1))], "x")
    r = verify_ir(parse_ir(selfref))
    assert "x@2 == x@2 + 1" in r.constraints and r.status == "unsat" and r.unsat_core == ("s2",)


def test_nested_operands_dropped_unless_allowed() -> None:
    obj = ir_of(
        [
            st("s1", "a", 2),
            se("s2", "b", "add", v("a"), {"op": "mul", "left": v("a"), "right": c(3)}),
            eq("s3", v("b"), c(8)),
        ],
        "a b",
    )
    ir = parse_ir(obj)
    r = verify_ir(ir)
    assert r.tracks == ("s1", "s3") and r.skipped_steps and "nested" in r.skipped_steps[0]
    assert "b@1 == 8" in r.constraints  # s2 bumped b before failing, as in [repo]
    r2 = verify_ir(ir, allow_nested=True)
    assert r2.tracks == ("s1", "s2", "s3") and r2.status == "sat" and r2.ear == 1.0


def test_timeout_is_reported() -> None:
    # x^3 + y^3 = z^3 with x, y, z >= 1 (Fermat, n=3): beyond Z3's nonlinear integer reasoning
    steps = [
        eq("g1", v("x"), c(1), "assert_ge"),
        eq("g2", v("y"), c(1), "assert_ge"),
        eq("g3", v("z"), c(1), "assert_ge"),
        se("s1", "x2", "mul", v("x"), v("x")),
        se("s2", "x3", "mul", v("x2"), v("x")),
        se("s3", "y2", "mul", v("y"), v("y")),
        se("s4", "y3", "mul", v("y2"), v("y")),
        se("s5", "z2", "mul", v("z"), v("z")),
        se("s6", "z3", "mul", v("z2"), v("z")),
        se("s7", "lhs", "add", v("x3"), v("y3")),
        eq("s8", v("lhs"), v("z3")),
    ]
    t0 = time.perf_counter()
    r = verify_ir(parse_ir(ir_of(steps, "x y z x2 x3 y2 y3 z2 z3 lhs")), timeout_ms=100)
    assert time.perf_counter() - t0 < 30
    assert r.status in ("timeout", "unknown") and r.acs is None and r.unknown_checks >= 1


def test_empty_ir() -> None:
    r = verify_ir(IR((), ()))
    assert r.status == "empty" and r.acs is None and r.fas0 is None and r.ear is None


# --------------------------------------------------------------------------- records


def test_verify_records_passes_fields_and_flags_invalid() -> None:
    records: list[dict[str, Any]] = [
        {"id": 1, "ir": SHORTCUT_IR, "extra": "kept"},
        {"id": 2},
        {"id": 3, "ir": {"variables": [], "steps": "nope"}},
        {"id": 4, "ir": ir_of([{"track": "s1", "op": "set_expr", "var": "y"}], "y")},
    ]
    out = list(verify_records(records))
    assert out[0]["extra"] == "kept" and out[0]["z3_status"] == "sat"
    assert (out[0]["acs"], out[0]["fas0"], out[0]["jss"], out[0]["rcr"]) == (1.0, 1.0, 1.0, 0.0)
    for row in out[1:3]:
        assert (
            row["z3_status"] == "invalid_ir"
            and row["z3_error"]
            and row["acs"] is None
            and row["fas0"] is None
        )
    assert "no 'ir'" in out[1]["z3_error"] and "steps" in out[2]["z3_error"]
    assert out[3]["z3_status"] == "empty" and out[3]["z3_skipped_steps"]  # lenient: skipped like [repo]
    strict = list(verify_records(records[3:], strict=True))
    assert strict[0]["z3_status"] == "invalid_ir" and "steps[0] (track 's1').expr" in strict[0]["z3_error"]
    assert json.dumps(out)  # JSON-serialisable


# --------------------------------------------------------------------------- published values


def _check_reproduction(records: list[dict[str, Any]]) -> list[int]:
    mismatched = []
    out = list(verify_records(records))
    for i, (rec, row) in enumerate(zip(records, out, strict=True)):
        res = verify_ir(parse_ir(rec["ir"], lenient=True))
        ok = (
            row["acs"] is not None
            and abs(row["acs"] - rec["acs"]) <= 1e-9
            and row["ear"] is not None
            and abs(row["ear"] - rec["ear"]) <= 1e-9
            and row["acs_t"] is not None
            and abs(row["acs_t"] - rec["acs_t"]) <= 1e-9
            and res.constraints == rec["S"]
            and list(res.tracks) == rec["tracks"]
        )
        if not ok:
            mismatched.append(i)
    return mismatched


def test_published_fixture_reproduced() -> None:
    records = load(FIXTURE)
    assert len(records) == 5
    assert _check_reproduction(records) == []
    # record 3 (index 2 here) states its set_expr targets as "lhs": ignored in the published run
    r = verify_ir(parse_ir(records[2]["ir"], lenient=True))
    assert any("'lhs'" in s for s in r.skipped_steps)
    repo = verify_ir(parse_ir(records[2]["ir"], lenient=True), dialect="repo")
    assert len(repo.tracks) > len(r.tracks)


@pytest.mark.shared
def test_published_acs_reproduced_all_80() -> None:
    if not REFERENCE.is_file():
        pytest.skip("needs ../shared/data (absent)")
    records = load(REFERENCE)
    assert len(records) == 80
    t0 = time.perf_counter()
    mismatched = _check_reproduction(records)
    elapsed = time.perf_counter() - t0
    print(f"reproduced {80 - len(mismatched)}/80 (acs, ear, acs_t, S, tracks) in {elapsed:.1f}s")
    assert mismatched == []  # no documented exceptions: all 80 match


# --------------------------------------------------------------------------- bad records and options


def test_a_constant_too_large_for_a_float_is_a_skipped_step_not_a_crash() -> None:
    good = ir_of([st("s1", "x", 3), se("s2", "final_answer", "add", v("x"), c(1)), eq("s3", v("final_answer"), c(4))],
                 "x final_answer")
    huge = ir_of([st("s1", "x", 10**400), eq("s2", v("final_answer"), c(10**400))], "x final_answer")
    out = list(verify_records([{"id": 1, "ir": good}, {"id": 2, "ir": huge}, {"id": 3, "ir": good}]))
    assert [r["z3_status"] for r in out] == ["sat", "empty", "sat"]
    assert len(out[1]["z3_skipped_steps"]) == 2 and all("number too large" in s for s in out[1]["z3_skipped_steps"])
    assert "(401 characters)" in out[1]["z3_skipped_steps"][0]  # the message shows a cut, not 400 digits
    strict = list(verify_records([{"ir": huge}], strict=True))[0]
    assert strict["z3_status"] == "invalid_ir" and "number too large" in strict["z3_error"]
    assert json.dumps(out)


def test_answer_text_with_more_digits_than_python_reads() -> None:
    ir = ir_of([st("s1", "x", 3), se("s2", "final_answer", "add", v("x"), c(1))], "x final_answer")
    for text in ("#### " + "9" * 5000, "the answer is " + "9" * 5000, "9" * 5000):
        row = list(verify_records([{"ir": ir, "answer": text}]))[0]
        assert row["z3_status"] == "sat" and row["z3_answer"] is None and row["fas0"] is None


def test_an_ir_nested_too_deeply_is_invalid() -> None:
    expr: dict[str, Any] = v("x")
    for _ in range(5000):
        expr = {"op": "add", "left": expr, "right": c(1)}
    deep = ir_of([{"track": "s1", "op": "set_expr", "var": "y", "expr": expr}], "x y")
    rows = list(verify_records([{"id": 1, "ir": deep}, {"id": 2, "ir": SHORTCUT_IR}]))
    assert rows[0]["z3_status"] == "invalid_ir" and "nested too deeply" in rows[0]["z3_error"]
    assert rows[1]["z3_status"] == "sat"


@pytest.mark.parametrize("timeout_ms", [0, -1])
def test_a_timeout_below_one_ms_is_refused(timeout_ms: int) -> None:
    """Z3 reads 0 as "no limit": a nonlinear IR would run forever."""
    with pytest.raises(ValueError, match="timeout_ms must be a positive"):
        verify_records([{"ir": SHORTCUT_IR}], timeout_ms=timeout_ms)
    with pytest.raises(ValueError, match="timeout_ms must be a positive"):
        verify_ir(parse_ir(SHORTCUT_IR), timeout_ms=timeout_ms)
