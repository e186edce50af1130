"""Fuzzing the spec loader (`legival_core/run_config`: `parse_spec`, `load_spec`): a benchmark spec is
hand-written YAML.

Any mapping, any edit of a shipped example spec (examples/*.yaml), any edit of its YAML text ->
a `BenchmarkSpec` or `SpecError`; never a raw pydantic `ValidationError`, `ValueError`, `KeyError`,
`RuntimeError` or `RecursionError`. A spec that validates satisfies the model's own rules (one source
per teacher, registered dataset names, unique names) and validates again from its own dump.
"""

from __future__ import annotations

import copy
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from hypothesis import example, given
from hypothesis import strategies as st

from legival_core.registry import canonical_name
from legival_core.run_config import BenchmarkSpec, SpecError, load_spec, parse_spec
from tests.conftest import REPO
from tests.fuzz._text import FRAGMENTS
from tests.fuzz._values import BIG, json_values, mutated
from tests.fuzz.conftest import fuzz

pytestmark = pytest.mark.timeout(120, method="thread")

EXAMPLES = REPO / "examples"
SPECS = sorted(p for p in EXAMPLES.glob("*.yaml") if "teachers" in (yaml.safe_load(p.read_text(encoding="utf-8")) or {}))
"""The benchmark specs among the examples (a reward spec, examples/reward.yaml, has no teachers: its own test)."""
SPEC_DICTS = [yaml.safe_load(p.read_text(encoding="utf-8")) for p in SPECS]
SPEC_TEXTS = [p.read_text(encoding="utf-8") for p in SPECS]


def _keys() -> list[str]:
    """Every field name of every spec model (the spec's own vocabulary, from the models themselves)."""
    out: set[str] = set()
    todo: list[Any] = [BenchmarkSpec]
    while todo:
        model = todo.pop()
        for name, info in model.model_fields.items():
            out.add(name)
            for arg in (info.annotation, *getattr(info.annotation, "__args__", ())):
                for inner in (arg, *getattr(arg, "__args__", ())):
                    if isinstance(inner, type) and hasattr(inner, "model_fields") and inner not in todo:
                        todo.append(inner)
    return sorted(out)


KEYS = st.sampled_from(_keys())
VALUES = json_values(KEYS, st.one_of(json_values(KEYS).filter(lambda v: not isinstance(v, list | dict)),
                                     st.sampled_from(("gsm8k", "math", "embedded", "lexical", "float32", "spec",
                                                      "data/gsm8k_md_eval_cot_5teachers.jsonl", "clarity"))))
MAPPINGS = st.dictionaries(KEYS, VALUES, max_size=6)


def _spec_dict(i: int) -> dict[str, Any]:
    return SPEC_DICTS[i]


EXAMPLE_SPECS = st.integers(0, len(SPECS) - 1).map(_spec_dict)


def check_parse(data: Any, check_files: bool) -> BenchmarkSpec | None:
    try:
        spec = parse_spec(data, EXAMPLES, "fuzz.yaml", check_files=check_files)
    except SpecError as e:
        assert str(e).startswith("fuzz.yaml")
        return None
    check_spec(spec)
    return spec


def check_spec(spec: BenchmarkSpec) -> None:
    assert isinstance(spec, BenchmarkSpec) and spec.teachers and spec.datasets
    for t in spec.teachers:
        assert bool(t.traces) != (t.generate is not None)
    assert all(canonical_name("dataset", d) == d for d in spec.datasets)
    assert len({t.name for t in spec.teachers}) == len(spec.teachers)
    assert len({s.name for s in spec.students}) == len(spec.students)
    assert parse_spec(spec.model_dump(), None, "dump", check_files=False) == spec


@fuzz(60)
@given(data=st.one_of(MAPPINGS, VALUES), check_files=st.booleans())
@example(data={"teachers": [{"name": "a", "traces": ["~nobody_here/t.jsonl"]}], "datasets": ["gsm8k"]},
         check_files=False)  # RuntimeError from Path.expanduser
@example(data={"teachers": "a", "datasets": None, "transfer": {"profile": ["x"]}}, check_files=True)
def test_any_mapping_parses_or_raises_spec_error(data: Any, check_files: bool) -> None:
    check_parse(data, check_files)


@fuzz(80)
@given(data=mutated(EXAMPLE_SPECS, VALUES), check_files=st.booleans())
def test_edited_example_specs_parse_or_raise_spec_error(data: Any, check_files: bool) -> None:
    check_parse(data, check_files)


def test_the_example_specs_still_validate() -> None:
    assert SPECS
    for data in SPEC_DICTS:
        check_spec(parse_spec(copy.deepcopy(data), EXAMPLES, "example"))


# Examples that raised something else, as plain tests: Hypothesis cannot print a 5,000-digit integer.
FOUND = {
    "a 5,000-digit literal": ("transfer", {"profile": BIG}),  # format_errors: repr -> ValueError
    "a list nested past the recursion limit as a literal": ("transfer", {"profile": None}),  # set below
    "a 5,000-digit key": (BIG, 1),  # str(key) -> ValueError (reported, but as that message)
    "a home directory that does not exist": ("store", "~nobody_here/x.duckdb"),  # RuntimeError
}


@pytest.mark.parametrize("name", FOUND)
def test_values_that_raised_other_errors_raise_spec_error(name: str) -> None:
    key, value = FOUND[name]
    if "recursion" in name:
        deep: list[Any] = []
        for _ in range(5000):
            deep = [deep]
        value = {"profile": deep}
    data = copy.deepcopy(SPEC_DICTS[0])
    data[key] = value
    with pytest.raises(SpecError) as info:
        parse_spec(data, EXAMPLES, "fuzz.yaml")
    assert "Exceeds the limit" not in str(info.value)


# --- YAML text ------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def spec_dir() -> Iterator[Path]:
    with tempfile.TemporaryDirectory(prefix="legival-fuzz-spec-") as d:
        yield Path(d)


@st.composite
def edited_text(draw: st.DrawFn) -> str:
    """An example spec's YAML with up to four edits: a fragment inserted, a range deleted or repeated."""
    text = SPEC_TEXTS[draw(st.integers(0, len(SPEC_TEXTS) - 1))]
    for _ in range(draw(st.integers(0, 4))):
        i = draw(st.integers(0, len(text)))
        j = draw(st.integers(i, min(len(text), i + 80)))
        edit = draw(st.sampled_from(("insert", "delete", "repeat")))
        if edit == "insert":
            piece = draw(st.one_of(st.sampled_from(YAML_PIECES), st.sampled_from(FRAGMENTS)))
            text = text[:i] + piece + text[i:]
        elif edit == "delete":
            text = text[:i] + text[j:]
        else:
            text = text[:j] + text[i:j] * draw(st.integers(1, 3)) + text[j:]
    return text


YAML_PIECES = (
    ": ", "- ", "\n  ", "\n- ", "&a ", "*a", "<<: *a\n", "!!python/object:os.system ", "!!timestamp ", "2001-02-30",
    "1" * 5000, "0x" + "f" * 40, "[" * 600, "{", "}", "]", "'", '"', "\\ud800", "\t", "? ", "~", "null", ".nan",
    "1e400", "!!binary x", "%YAML 1.1\n---\n", "---\n", "...\n", "\x00", "\ufeff", "key: value\n", "teachers: 3\n",
)


def test_a_spec_file_that_is_not_utf8_raises_spec_error(spec_dir: Path) -> None:
    path = spec_dir / "latin1.yaml"
    path.write_bytes("name: caf\u00e9\ndatasets: [gsm8k]\n".encode("latin-1"))  # was UnicodeDecodeError
    with pytest.raises(SpecError, match="not UTF-8"):
        load_spec(path)


@fuzz(40)
@given(text=edited_text(), check_files=st.booleans())
@example(text="name: x\nstore: " + "1" * 5000 + "\n", check_files=False)  # yaml: int() -> ValueError
@example(text="datasets: [gsm8k]\nstore: 2001-02-30\n", check_files=False)  # yaml: date -> ValueError
@example(text="datasets: " + "[" * 600 + "]" * 600 + "\n", check_files=False)  # yaml: RecursionError
def test_edited_yaml_text_loads_or_raises_spec_error(spec_dir: Path, text: str, check_files: bool) -> None:
    path = spec_dir / "spec.yaml"
    path.write_text(text, encoding="utf-8", errors="surrogatepass")
    try:
        spec = load_spec(path, check_files=check_files)
    except SpecError:
        return
    check_spec(spec)
