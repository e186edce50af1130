"""Fuzzing answer extraction and the grader of every registered dataset (SPEC section 2).

Any text -> a `Grade`, never an exception, in time linear in the text. The graders are taken from the
registry (a new dataset is fuzzed the day it is registered), each with a problem loaded by its own
loader from `tests/fixtures/datasets/`. math-verify's worker is replaced by a stub answering
"different" (it is bounded by its own hard timeout, `grading/worker.py`; one test below sends it lone
surrogates for real): what is fuzzed is the Python on the grader's side.

The explicit `@example`s and the `test_degenerate_*` cases are the inputs that found bugs: they hung
(catastrophic backtracking, one pass per nesting level) or raised `RecursionError`.
"""

from __future__ import annotations

import re
import time
from collections.abc import Iterator

import pytest
from hypothesis import example, given
from hypothesis import strategies as st

from legival_core.datasets import get_dataset
from legival_core.grading import AnswerGrader, extract_answer, first_answer_complete, grade_pred
from legival_core.grading import normalize as normalize_mod
from legival_core.grading.extract import boxed_spans
from legival_core.grading.groups import _drop_trailing_note, _line_group, connections_answers
from legival_core.registry import get, names
from legival_core.types import Grade, Problem
from tests.conftest import FIXTURES
from tests.fuzz._text import TEXT, degenerate
from tests.fuzz.conftest import fuzz

pytestmark = pytest.mark.timeout(120, method="thread")

GRADERS = names("grader")
ROLES = st.sampled_from(("teacher", "student"))


def _problem(dataset: str) -> Problem:
    """The first problem that the dataset's own loaders read from any file under tests/fixtures/datasets
    (AGENTS.md: a new dataset comes with a small fixture there)."""
    spec = get_dataset(dataset)
    for path in sorted((FIXTURES / "datasets").rglob("*")):
        for fmt in spec.loaders:
            if not path.is_file() or path.suffix != f".{fmt}":
                continue
            try:
                problems = list(spec.load(path, fmt))
            except (ValueError, KeyError, TypeError):  # another dataset's file
                continue
            if problems and problems[0].dataset == spec.name:
                return problems[0]
    raise AssertionError(f"no fixture under {FIXTURES / 'datasets'} loads as dataset {dataset!r} (AGENTS.md)")


PROBLEMS = {d: _problem(d) for d in GRADERS}


@pytest.fixture(scope="module", autouse=True)
def _math_verify_stub() -> Iterator[None]:
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr("legival_core.grading.math_equiv.verify_in_worker",
                   lambda pairs, timeout_s=None, worker=None: "different")
        yield


def check_grade(dataset: str, answer_text: str, reasoning: str, role: str) -> Grade:
    """Grade and check the invariants of a grade and of its agreement with extraction."""
    grader = get("grader", dataset)
    grade = grader(answer_text, reasoning, PROBLEMS[dataset], role)
    assert isinstance(grade, Grade)
    assert grade.status in ("ok", "unparsed", "timeout")
    assert isinstance(grade.correct, bool)
    assert grade.extracted is None or isinstance(grade.extracted, str)
    if grade.status != "ok":
        assert not grade.correct
    assert grade.groups_correct is None or 0 <= grade.groups_correct <= 4
    extracted = extract_answer(dataset, answer_text, reasoning, role)  # type: ignore[arg-type]
    if extracted is None:
        assert grade.status == "unparsed" and grade.extracted is None
    else:
        assert grade.extracted == extracted
    if role == "student":
        assert first_answer_complete(dataset, answer_text) == (extracted is not None)
    return grade


@pytest.mark.parametrize("dataset", GRADERS)
@fuzz(60)
@given(answer_text=TEXT, reasoning=TEXT, role=ROLES)
@example(answer_text="[" * 3000 + "]" * 3000, reasoning="", role="teacher")  # RecursionError (json.loads)
@example(answer_text='{"group": ' * 1200 + "}" * 1200, reasoning="", role="student")  # the same, an object
@example(answer_text="\ud800\\boxed{\udfff}", reasoning="\x00", role="teacher")
def test_any_text_grades(dataset: str, answer_text: str, reasoning: str, role: str) -> None:
    check_grade(dataset, answer_text, reasoning, role)


@pytest.mark.parametrize("dataset", GRADERS)
@fuzz(8, deadline_s=15)
@given(text=degenerate(60_000), role=ROLES)
def test_degenerate_long_text_grades(dataset: str, text: str, role: str) -> None:
    check_grade(dataset, text, text[:1000], role)


@pytest.mark.parametrize("dataset", GRADERS)
@fuzz(40)
@given(text=TEXT, more=TEXT)
@example(text="\\boxed{1}" + "\\boxed{" * 20, more="}" * 20)  # closing outer boxes must not move the answer
def test_student_answer_never_changes_when_text_is_appended(dataset: str, text: str, more: str) -> None:
    """SPEC section 4: once student-role extraction finds an answer, appending text cannot change it
    (which is why generation may stop at `first_answer_complete`)."""
    found = extract_answer(dataset, text, "", "student")
    if found is not None:
        assert extract_answer(dataset, text + more, "", "student") == found


@pytest.mark.parametrize("dataset", GRADERS)
@fuzz(40)
@given(pred=TEXT, pred_format=st.sampled_from(("answer", "response", "auto")))
def test_any_prediction_grades_in_every_format(dataset: str, pred: str, pred_format: str) -> None:
    grader = get("grader", dataset)
    grade, read_as = grade_pred(grader, pred, PROBLEMS[dataset], "teacher", pred_format)  # type: ignore[arg-type]
    assert isinstance(grade, Grade) and read_as in ("answer", "response")
    if pred_format != "auto":
        assert read_as == pred_format
    if isinstance(grader, AnswerGrader):
        assert isinstance(grader.has_marker(pred), bool)


@fuzz(60)
@given(text=TEXT)
def test_boxes_are_balanced_spans_of_the_text(text: str) -> None:
    for c in boxed_spans(text):
        assert 0 <= c.start < c.end <= len(text) and text[c.end - 1] == "}"
        assert c.value == text[text.index("{", c.start) + 1 : c.end - 1].strip()
    assert [c.start for c in boxed_spans(text)] == sorted(c.start for c in boxed_spans(text))


# --- degenerate inputs that hung: each now runs in linear time --------------------------------------

N = 50_000
DEGENERATE = {
    "#### then spaces": "#### " + " " * N + "x",  # `####\s*\$?\s*`: adjacent quantifiers, quadratic
    "answer: then spaces": "answer: " + " " * N + "1",  # letters: `[ \t*:]*` then `\s*`
    "answer is option then spaces": "The answer is option" + " " * N + "1",  # `option\s+` then `\s*`
    "boxed option then spaces": "\\boxed{option" + " " * N + "1}",  # `_letter_of`: `\s*[(\[]?\s*`
    "nested boxes": "\\boxed{" * (N // 7) + "1" + "}" * (N // 7),  # every level a candidate: quadratic
    "nested text wrappers": "\\boxed{" + "\\text{" * (N // 6) + "1" + "}" * (N // 6) + "}",  # unwrap_whole
    "box with a run of spaces": "\\boxed{1" + " " * N + "x}",  # strip_string's `\s*\\text{degrees}\s*$`
    "trailing unit then spaces": "\\boxed{5\\text{ cm}" + " " * N + "x}",  # remove_trailing_units
    "nested brackets": "[" * (N // 2) + "]" * (N // 2),  # json.loads per level; RecursionError
    "nested groups objects": '{"group": ' * (N // 10) + "}" * (N // 10),
    "a group line of open parentheses": "A, B, C, " + "(" * N + ")(x)\n",  # `\s*\([^)]*\)\s*$`
    "phrase loop": "The answer is 1. " * (N // 17),
    "unclosed boxes": "\\boxed{" * (N // 7),
}


@pytest.mark.parametrize("name", DEGENERATE)
def test_degenerate_inputs_grade_in_linear_time(name: str) -> None:
    """50 KB of each input that took minutes at this size (quadratic: 4 KB of `#### ` + spaces took
    1.3 s) or crashed is graded by every grader in well under a second (150 KB: 0.7 s at most on the
    2-core dev machine, idle; the bound leaves room for load)."""
    text = DEGENERATE[name]
    for dataset in GRADERS:
        grader = get("grader", dataset)
        for role in ("teacher", "student"):
            start = time.perf_counter()
            assert isinstance(grader(text, "", PROBLEMS[dataset], role), Grade)
            elapsed = time.perf_counter() - start
            assert elapsed < 5, f"{dataset} ({role}) took {elapsed:.1f} s on {name!r}"


# --- the linear rewrites accept exactly what the regular expressions did ----------------------------

SMALL = st.text(alphabet=" \t\n\u00a0()[]{}$*:.,-^\\xaoptinAC1235_=", max_size=24)
OLD_LETTER_VALUE = re.compile(r"(?:option|choice)?\s*[(\[]?\s*([A-Z])\s*[)\]]?(?=$|[\s.,:;)*])", re.IGNORECASE)
OLD_LETTER_PHRASE = re.compile(
    r"(?:\b(?:the\s+)?(?:correct\s+|final\s+)?answer\s*(?:is|:)|^[ \t*#]*answer\s*:)"
    r"[ \t*:]*(?:option\s+|choice\s+)?[(\[]?\s*([A-Za-z])\b[)\]]?",
    re.IGNORECASE | re.MULTILINE,
)


def _old_unwrap_whole(s: str) -> str:
    changed = True
    while changed:
        changed = False
        for w in normalize_mod._UNIT_WRAPPERS:
            if s.startswith(w):
                end = normalize_mod._matching_brace(s, len(w) - 1)
                if end == len(s) - 1:
                    s = s[len(w) : -1].strip()
                    changed = True
    return s


def _spans(rx: re.Pattern[str], text: str) -> list[tuple[int, int, tuple[str | None, ...]]]:
    return [(m.start(), m.end(), m.groups()) for m in rx.finditer(text)]


@fuzz(300)
@given(text=st.one_of(SMALL, st.builds(lambda a, b: a + b, st.sampled_from(
    ("answer: ", "The answer is ", "final answer: ", "answer is option ", "choice ", "#### ", "#### $", "\\text{",
     "\\textbf{ \\mbox{", "5\\text{ cm}", "x \\text{ degrees }")), SMALL)))
def test_rewritten_patterns_match_what_the_old_ones_matched(text: str) -> None:
    from legival_core.grading import extract

    assert _spans(extract._LETTER_PHRASE_RE, text) == _spans(OLD_LETTER_PHRASE, text)
    m_new, m_old = extract._LETTER_VALUE_RE.match(text), OLD_LETTER_VALUE.match(text)
    assert (m_new and (m_new.span(), m_new.groups())) == (m_old and (m_old.span(), m_old.groups()))
    old_hash = re.compile(r"####\s*\$?\s*(" + extract.NUMBER_RE.pattern + ")")
    assert _spans(extract._HASH_RE, text) == _spans(old_hash, text)
    assert normalize_mod.unwrap_whole(text) == _old_unwrap_whole(text)
    assert normalize_mod.unwrap_whole(text.strip()) == _old_unwrap_whole(text.strip())
    old_units = re.sub(r"\s*(?:\\text\{\s*(?:degrees?|percent)\s*\})\s*$", "", text)
    m = normalize_mod._UNIT_WORD_RE.search(text)
    assert (text[: m.start()].rstrip() if m else text) == old_units
    assert bool(re.fullmatch(r"\s*+(?:\^\{?[23]\}?)?\s*+\.?", text)) == bool(
        re.fullmatch(r"\s*(?:\^\{?[23]\}?)?\s*\.?", text))
    assert _drop_trailing_note(text) == re.sub(r"\s*\([^)]*\)\s*$", "", text)


@fuzz(100)
@given(text=TEXT)
def test_group_lines_and_json_agree_with_the_board_rules(text: str) -> None:
    for line in text.splitlines():
        group = _line_group(line)
        assert group is None or len(group) == 4
    for c in connections_answers(text, False):
        assert 0 <= c.start < c.end <= len(text) and c.tier == 1


# --- the real math-verify worker --------------------------------------------------------------------


def test_math_verify_worker_answers_on_lone_surrogates_and_nul() -> None:
    """The one path the stub hides: the worker receives the strings over a pipe (pickled) and parses
    them with sympy; a lone surrogate or NUL is an answer ("different"), not a crash."""
    from legival_core.grading.worker import MathVerifyWorker, verify_in_worker

    worker = MathVerifyWorker()
    try:
        for pred in ("\ud800", "1\udfff+x", "\\frac{1}{\ud83d}", "\x00", "\ufeff2"):
            assert verify_in_worker([("\\frac{1}{2}", pred)], timeout_s=20, worker=worker) in ("different", "timeout")
        assert verify_in_worker([("\\frac{1}{2}", "\\frac{2}{4}")], timeout_s=20, worker=worker) == "equal"
    finally:
        worker.close()


def test_every_registered_dataset_has_a_fixture_problem() -> None:
    assert set(PROBLEMS) == set(GRADERS) and all(p.dataset == d for d, p in PROBLEMS.items())
