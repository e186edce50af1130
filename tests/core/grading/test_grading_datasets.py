"""Dataset modules: loaders (ids, gold, bad data), per-dataset graders on real examples, the GPQA
shuffle, connections partial credit, and the registry entries (prompts, forcing text, versions)."""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest

from legival_core.datasets import DatasetSpec, get_dataset
from legival_core.datasets.gpqa import shuffled_choices
from legival_core.grading import verify_stats
from legival_core.types import Problem
from tests.conftest import FIXTURES

FIX = FIXTURES / "datasets"


def _load(name: str, path: Path) -> list[Problem]:
    return list(get_dataset(name).load(path))


# --- registry --------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "name,forcing",
    [
        ("gsm8k", "The answer is \\boxed{"),
        ("math", "The answer is \\boxed{"),
        ("gpqa", "The correct answer is \\boxed{"),
        ("lsat", "The correct answer is \\boxed{"),
        ("connections", "My final groupings are: ```"),
    ],
)
def test_specs_registered(name: str, forcing: str) -> None:
    spec = get_dataset(name)
    assert isinstance(spec, DatasetSpec)
    assert spec.forcing_text == forcing
    assert spec.system_prompt.strip() and spec.grader_version.startswith(name)


def test_paper_prompts_verbatim() -> None:
    assert get_dataset("math").system_prompt.startswith("You are an expert on answering and explaining math")
    assert "did. \n2. Your answer" in get_dataset("math").system_prompt
    assert '"The correct answer is \\boxed{X}"' in get_dataset("gpqa").system_prompt
    assert get_dataset("connections").system_prompt.endswith("Please respond in a JSON format.")


# --- GSM8K -----------------------------------------------------------------------------------------


def test_gsm8k_loader_ids_and_gold() -> None:
    probs = _load("gsm8k", FIX / "gsm8k" / "test.jsonl")
    assert [p.problem_id for p in probs] == [f"gsm8k-test-{i}" for i in range(5)]
    assert [p.gold for p in probs[:3]] == ["18", "3", "70000"]
    assert probs[0].question.startswith("Janet")
    assert [p.problem_id for p in get_dataset("gsm8k").loaders["jsonl"](FIX / "gsm8k" / "test.jsonl")][
        :1
    ] == ["gsm8k-test-0"]


def test_gsm8k_split_argument() -> None:
    from legival_core.datasets.gsm8k import load_gsm8k

    assert next(load_gsm8k(FIX / "gsm8k" / "test.jsonl", split="dev")).problem_id == "gsm8k-dev-0"


def test_gsm8k_grader_real_answers() -> None:
    janet, _, house = _load("gsm8k", FIX / "gsm8k" / "test.jsonl")[:3]
    g = get_dataset("gsm8k").grader
    assert g("She makes 9 * 2 = $18 every day.", "", janet, "teacher").correct
    assert g("\\boxed{\\$18.00}", "", janet, "teacher").correct
    assert g("#### 18", "", janet, "teacher").correct
    assert g("", "so 16 - 3 - 4 = 9 eggs, 9 * 2 = 18", janet, "teacher").correct
    assert g("Profit = \\boxed{\\$70{,}000}.", "", house, "teacher").correct
    assert g("The answer is $70,000.\n", "", house, "student").correct
    assert not g("The answer is 18%.\n", "", house, "student").correct
    un = g("She makes 9 * 2 = 18 dollars", "", janet, "student")
    assert (un.correct, un.extracted, un.status) == (False, None, "unparsed")


# --- MATH ------------------------------------------------------------------------------------------


def test_math_loader_ids_gold_meta() -> None:
    m500 = _load("math", FIX / "math" / "math500_test.jsonl")
    assert m500[0].problem_id == "test/precalculus/807.json"
    assert m500[0].gold == "\\left( 3, \\frac{\\pi}{2} \\right)"
    assert ("subject", "Precalculus") in m500[0].meta
    full = _load("math", FIX / "math" / "math_test.jsonl")
    assert [p.problem_id for p in full] == ["math-test-0", "math-test-1", "math-test-2"]
    assert ("math500_unique_id", "test/algebra/1547.json") in full[1].meta


def test_math_gold_from_solution_when_answer_missing(tmp_path: Path) -> None:
    f = tmp_path / "m.jsonl"
    f.write_text(json.dumps({"problem": "1+1?", "solution": "It is $\\boxed{2}$."}) + "\n")
    assert _load("math", f)[0].gold == "2"


def test_math_grader_real_answers() -> None:
    polar, pq, frac, divisors = _load("math", FIX / "math" / "math500_test.jsonl")
    g = get_dataset("math").grader
    assert g("Therefore $\\boxed{(3, \\frac{\\pi}{2})}$.", "", polar, "teacher").correct
    assert g("\\boxed{p-q}", "", pq, "teacher").correct
    assert not g("\\boxed{q-p}", "", pq, "teacher").correct
    assert g("\\boxed{\\dfrac{14}{3}}", "", frac, "teacher").correct
    assert g("The answer is $\\frac{14}{3}$.", "", frac, "student").correct
    assert g("First \\boxed{8}, no wait \\boxed{9}", "", divisors, "teacher").correct
    assert not g("First \\boxed{8}, no wait \\boxed{9}", "", divisors, "student").correct
    assert g("no box", "", divisors, "teacher").status == "unparsed"


# --- GPQA ------------------------------------------------------------------------------------------


def test_gpqa_shuffle_is_deterministic_and_stored() -> None:
    a = _load("gpqa", FIX / "gpqa.csv")
    b = _load("gpqa", FIX / "gpqa.csv")
    assert a == b
    assert [p.problem_id for p in a] == ["gpqa-recTEST0001", "gpqa-recTEST0002", "gpqa-recTEST0003"]
    for p in a:
        assert len(p.choices) == 4 and p.gold in "ABCD"
        for i, c in enumerate(p.choices):
            assert f"{'ABCD'[i]}. {c}" in p.question
    correct = {"gpqa-recTEST0001": "2S1/2", "gpqa-recTEST0002": "Mitochondrion", "gpqa-recTEST0003": "2"}
    for p in a:
        assert p.choices["ABCD".index(p.gold)] == correct[p.problem_id]


def test_gpqa_shuffle_depends_on_problem_id_only() -> None:
    ch1, gold1 = shuffled_choices("gpqa-x", "right", ["w1", "w2", "w3"])
    ch2, gold2 = shuffled_choices("gpqa-x", "right", ["w1", "w2", "w3"])
    assert (ch1, gold1) == (ch2, gold2)
    golds = {shuffled_choices(f"gpqa-{i}", "right", ["w1", "w2", "w3"])[1] for i in range(40)}
    assert golds == set("ABCD")  # the correct option is not always in one place


def test_gpqa_grader() -> None:
    p = _load("gpqa", FIX / "gpqa.csv")[1]
    wrong = next(x for x in "ABCD" if x != p.gold)
    g = get_dataset("gpqa").grader
    assert g(f"The correct answer is \\boxed{{{p.gold}}}", "", p, "teacher").correct
    assert g(f"The correct answer is ({p.gold}).", "", p, "student").correct
    assert not g(f"Answer: {wrong}\n", "", p, "student").correct
    assert g("I am not sure.", "", p, "teacher").status == "unparsed"


def test_gpqa_missing_column(tmp_path: Path) -> None:
    f = tmp_path / "g.csv"
    f.write_text("Question,Correct Answer\nq,a\n")
    with pytest.raises(ValueError, match=r"g\.csv:1: missing column.*Incorrect Answer 1"):
        _load("gpqa", f)


def test_gpqa_empty_field_names_line(tmp_path: Path) -> None:
    f = tmp_path / "g.csv"
    f.write_text(
        "Question,Correct Answer,Incorrect Answer 1,Incorrect Answer 2,Incorrect Answer 3\nq,a,b,c,d\nq2,,b,c,d\n"
    )
    with pytest.raises(ValueError, match=r"g\.csv:3: .*'Correct Answer'"):
        _load("gpqa", f)


# --- LSAT ------------------------------------------------------------------------------------------


def test_lsat_keeps_given_option_order() -> None:
    probs = _load("lsat", FIX / "lsat-lr.jsonl")
    assert [p.problem_id for p in probs] == ["lsat-lr-0", "lsat-lr-1"]
    assert probs[0].gold == "B" and probs[0].choices[1].startswith("Crime also fell")
    assert len(probs[0].choices) == 5 and "E. Crime statistics" in probs[0].question
    assert probs[0].question.startswith("A city council")
    g = get_dataset("lsat").grader
    assert g("The correct answer is \\boxed{B}", "", probs[0], "teacher").correct
    assert not g("The correct answer is \\boxed{E}", "", probs[0], "teacher").correct


def test_lsat_bad_label(tmp_path: Path) -> None:
    f = tmp_path / "lsat-ar.jsonl"
    rec = {"passage": "p", "question": "q", "options": ["(A)x", "(B)y"], "label": "D"}
    f.write_text(json.dumps(rec) + "\n")
    with pytest.raises(ValueError, match=r"lsat-ar\.jsonl:1: field 'label'"):
        _load("lsat", f)


# --- connections -----------------------------------------------------------------------------------


def test_connections_loader() -> None:
    p = _load("connections", FIX / "connections.jsonl")[0]
    assert p.problem_id == "connections-9001"
    assert p.question.startswith("Words: ['VENUS', 'SNOW', ")
    gold = json.loads(p.gold)
    assert len(gold) == 4 and ["EARTH", "MARS", "SATURN", "VENUS"] in gold
    assert all(g == sorted(g) for g in gold)


def test_connections_partial_credit() -> None:
    p = _load("connections", FIX / "connections.jsonl")[0]
    g = get_dataset("connections").grader
    full = {"Groupings": {"1": {"Category": "a", "Words": ["mars", "venus", "earth", "saturn"]},
                          "2": {"Category": "b", "Words": ["KING", "QUEEN", "ROOK", "BISHOP"]},
                          "3": {"Category": "c", "Words": ["BASKET", "FOOT", "SNOW", "EYE"]},
                          "4": {"Category": "d", "Words": ["LATTE", "MOCHA", "ESPRESSO", "AMERICANO"]}}}  # fmt: skip
    grade = g("```json\n" + json.dumps(full) + "\n```", "", p, "teacher")
    assert grade.correct and grade.groups_correct == 4
    two = "BASKET, FOOT, SNOW, MOCHA\nLATTE, EYE, ESPRESSO, AMERICANO\nKING, QUEEN, ROOK, BISHOP\nEARTH, MARS, SATURN, VENUS\n"
    grade = g(two, "", p, "student")
    assert not grade.correct and grade.groups_correct == 2
    none = g("I give up", "", p, "teacher")
    assert none.status == "unparsed" and none.groups_correct is None


def test_connections_bad_rows(tmp_path: Path) -> None:
    f = tmp_path / "c.jsonl"
    f.write_text('{"id": 1, "groups": [], "words_shuffled": []}\n')
    with pytest.raises(ValueError, match=r"c\.jsonl:1: field 'groups'"):
        _load("connections", f)
    f.write_text("\n{not json\n")
    with pytest.raises(ValueError, match=r"c\.jsonl:2: bad JSON"):
        _load("connections", f)


def test_missing_field_names_file_line_field(tmp_path: Path) -> None:
    f = tmp_path / "test.jsonl"
    f.write_text(
        json.dumps({"question": "q", "answer": "#### 1"}) + "\n" + json.dumps({"question": "q"}) + "\n"
    )
    with pytest.raises(ValueError, match=r"test\.jsonl:2: missing field 'answer'"):
        _load("gsm8k", f)
    f.write_text(json.dumps({"question": "q", "answer": "no hashes"}) + "\n")
    with pytest.raises(ValueError, match=r"test\.jsonl:1: field 'answer'"):
        _load("gsm8k", f)


# --- real data (skipped without ../shared/data) ------------------------------------------------------


@pytest.mark.shared
def test_math500_traces_grade_fast_and_agree(shared_data: Path) -> None:
    """~300 real MATH answers (R1-Distill-Qwen-14B traces + worked solutions) graded in seconds,
    agreeing with the trace file's own math-verify labels."""
    spec = get_dataset("math")
    probs = {p.problem_id: p for p in spec.load(shared_data / "math" / "math500_test.jsonl")}
    path = shared_data / "reasoning_traces" / "math500" / "deepseek-r1-distill-qwen-14b.jsonl"
    rows = [json.loads(line) for line in path.open()]
    items = [(r["response"] or "", r["reasoning"], probs[r["problem_id"]], r["correct"]) for r in rows]
    solutions = [json.loads(line) for line in (shared_data / "math" / "math500_test.jsonl").open()]
    used = {r["problem_id"] for r in rows}
    items += [
        (s["solution"], "", probs[s["unique_id"]], True) for s in solutions if s["unique_id"] not in used
    ]
    items = items[:300]
    spec.grader("\\boxed{1}", "", items[0][2], "teacher")  # worker start-up, once per process
    calls0 = verify_stats().calls
    t0 = time.perf_counter()
    grades = [spec.grader(a, r, p, "teacher") for a, r, p, _ in items]
    elapsed = time.perf_counter() - t0
    assert elapsed < 15, elapsed
    assert verify_stats().calls - calls0 < len(items)
    for grade, (_, _, p, label) in zip(grades, items, strict=True):
        if label is not None:
            assert grade.correct == label, (p.problem_id, grade)
    print(f"graded {len(items)} MATH answers in {elapsed:.2f} s")


@pytest.mark.shared
def test_real_loaders_on_shared_data(shared_data: Path) -> None:
    gsm = _load("gsm8k", shared_data / "gsm8k" / "test.jsonl")
    assert len(gsm) == 1319 and gsm[2].gold == "70000"
    conn = _load("connections", shared_data / "nyt_connections" / "connections.jsonl")
    assert conn[0].problem_id == "connections-1" and len(conn) == 1163
    full = _load("math", shared_data / "math" / "math_test_5000.jsonl")
    assert len(full) == 5000 and full[0].problem_id == "math-test-0"
