"""The benchmark spec: what validates, and messages that say what to fix."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
import yaml

from legival_core.spec import SpecError, load_spec, parse_spec
from tests.conftest import REPO


def _base(tmp_path: Path) -> dict:
    (tmp_path / "t.jsonl").write_text("{}\n")
    return {"teachers": [{"name": "a", "traces": ["t.jsonl"]}], "datasets": ["gsm8k"]}


def test_demo_spec_validates_and_resolves_paths() -> None:
    s = load_spec(REPO / "examples" / "demo.yaml")
    assert len(s.teachers) >= 3
    assert all(p.is_absolute() and p.is_file() for t in s.teachers for p in t.traces)
    assert s.store == (REPO / "demo-out" / "demo.duckdb").resolve()
    assert s.report.out == (REPO / "demo-out" / "report").resolve()
    assert s.students[0].backend == "embedded" and s.judge.name == "lexical"
    cfg = s.student_config(s.students[0])
    assert cfg.max_new_tokens == 48 and cfg.step_interval == s.transfer.step_interval


def test_relative_paths_resolve_against_spec_folder(tmp_path: Path) -> None:
    d = _base(tmp_path) | {"store": "out/x.duckdb"}
    (tmp_path / "spec.yaml").write_text(yaml.safe_dump(d))
    s = load_spec(tmp_path / "spec.yaml")
    assert s.teachers[0].traces == [(tmp_path / "t.jsonl").resolve()]
    assert s.store == (tmp_path / "out" / "x.duckdb").resolve()


def test_unknown_key_lists_allowed_keys(tmp_path: Path) -> None:
    d = _base(tmp_path) | {"transfr": {}}
    with pytest.raises(SpecError) as e:
        parse_spec(d, tmp_path)
    msg = str(e.value)
    assert "unknown key(s) transfr" in msg and "allowed:" in msg and "transfer" in msg


def test_nested_unknown_key_names_location(tmp_path: Path) -> None:
    d = _base(tmp_path) | {"execution": {"gpus": 1}}
    with pytest.raises(SpecError, match=r"execution: unknown key\(s\) gpus; allowed: .*gpus_per_engine"):
        parse_spec(d, tmp_path)


def test_choices_are_validated_against_the_registry(tmp_path: Path) -> None:
    """Judges, backends, datasets and dtypes are checked against what is registered, and the message
    lists the registered names (never a hand-written list)."""
    from legival_core.registry import names

    d = _base(tmp_path) | {"judge": {"name": "gpt4"}}
    with pytest.raises(SpecError) as e:
        parse_spec(d, tmp_path)
    assert "judge.name" in str(e.value) and "'gpt4'" in str(e.value)
    assert all(j in str(e.value) for j in names("judge")) and "lexical" in names("judge")
    d = _base(tmp_path) | {"students": [{"name": "s", "backend": "nope"}]}
    with pytest.raises(SpecError) as e:
        parse_spec(d, tmp_path)
    assert "students.0.backend" in str(e.value) and all(b in str(e.value) for b in names("backend"))
    d = _base(tmp_path) | {"students": [{"name": "s", "backend": "embedded", "dtype": "float16"}]}
    with pytest.raises(SpecError, match="backend 'embedded' runs dtype float32 | bfloat16, not 'float16'"):
        parse_spec(d, tmp_path)
    ok = parse_spec(_base(tmp_path) | {"students": [{"name": "s", "backend": "vllm", "dtype": "float16"}]}, tmp_path)
    assert ok.students[0].dtype == "float16"
    d = _base(tmp_path) | {"quality": {"metrics": ["clarity", "nope"]}}
    with pytest.raises(SpecError, match="unknown quality metric 'nope'"):
        parse_spec(d, tmp_path)


def test_one_spelling_per_model_and_one_source_of_defaults(tmp_path: Path) -> None:
    """The student's model has one canonical name whatever spelling the spec uses, and a command's
    defaults are the spec's: `legival transfer` and `legival run` build the same student key."""
    import inspect

    from legival.commands.transfer import transfer
    from legival_core.catalog import SMOLLM2
    from legival_core.spec import Student, Transfer, student_config

    for spelling in ("smollm2-135m-instruct", "SmolLM2-135M-Instruct-Q4_1-gguf", "smollm2"):
        st = parse_spec(_base(tmp_path) | {"students": [{"name": "s", "model": spelling}]}, tmp_path).students[0]
        assert st.model == SMOLLM2
    spec = parse_spec(_base(tmp_path), tmp_path)
    assert spec.student_config(spec.students[0]) == student_config()
    defaults = {p.name: p.default for p in inspect.signature(transfer).parameters.values()}
    assert defaults["max_new_tokens"] == Transfer().max_new_tokens
    assert defaults["student"] == Student().name and defaults["model"] == Student().model


def test_teacher_needs_exactly_one_source(tmp_path: Path) -> None:
    d = _base(tmp_path)
    d["teachers"][0]["generate"] = {"backend": "vllm", "model": "x"}
    with pytest.raises(SpecError, match="exactly one of"):
        parse_spec(d, tmp_path)
    d["teachers"] = [{"name": "g", "generate": {"backend": "vllm", "model": "Qwen/Qwen3-4B"}}]
    assert parse_spec(d, tmp_path).teachers[0].generate is not None


def test_missing_file_unknown_dataset_duplicates(tmp_path: Path) -> None:
    d = _base(tmp_path)
    d["teachers"].append({"name": "a", "traces": ["nope.jsonl"]})
    d["datasets"] = ["gsm9k"]
    with pytest.raises(SpecError) as e:
        parse_spec(d, tmp_path)
    msg = str(e.value)
    assert "nope.jsonl" in msg and "gsm9k" in msg and "known:" in msg


def test_duplicate_names(tmp_path: Path) -> None:
    d = _base(tmp_path)
    d["teachers"].append(dict(d["teachers"][0]))
    with pytest.raises(SpecError, match="duplicate teacher name"):
        parse_spec(d, tmp_path)


def test_execution_never_changes_student_key(tmp_path: Path) -> None:
    a = parse_spec(_base(tmp_path), tmp_path)
    b = parse_spec(_base(tmp_path) | {"execution": {"max_concurrent_engines": 8, "gpus_per_engine": 1}}, tmp_path)
    assert a.student_config(a.students[0]).student_key == b.student_config(b.students[0]).student_key
    c = parse_spec(_base(tmp_path) | {"transfer": {"max_new_tokens": 7}}, tmp_path)
    assert c.student_config(c.students[0]).student_key != a.student_config(a.students[0]).student_key


def test_add_teacher_keeps_comments_and_registers_deployment(tmp_path: Path) -> None:
    from typer.testing import CliRunner

    from legival.cli import app

    shutil.copy(REPO / "examples" / "demo.yaml", tmp_path / "demo.yaml")
    text = (tmp_path / "demo.yaml").read_text().replace("data/", str(REPO / "examples" / "data") + "/")
    (tmp_path / "demo.yaml").write_text(text)
    new = REPO / "examples" / "data" / "gsm8k_gpt-oss-120b_200.jsonl"
    r = CliRunner().invoke(app, ["add-teacher", "gpt-oss-120b-full", "--traces", str(new),
                                 "--spec", str(tmp_path / "demo.yaml"), "--prefect-file", str(tmp_path / "prefect.yaml")])
    assert r.exit_code == 0, r.output
    after = (tmp_path / "demo.yaml").read_text()
    assert [ln for ln in text.splitlines() if "#" in ln] == [ln for ln in after.splitlines() if "#" in ln]
    s = load_spec(tmp_path / "demo.yaml")
    assert s.teachers[-1].name == "gpt-oss-120b-full" and s.teachers[-1].traces == [new]
    assert [t.name for t in s.teachers[:-1]] == [t.name for t in load_spec(REPO / "examples" / "demo.yaml").teachers]
    deps = yaml.safe_load((tmp_path / "prefect.yaml").read_text())["deployments"]
    (dep,) = [d for d in deps if d["name"] == "teacher-gpt-oss-120b-full"]
    assert dep["parameters"]["teachers"] == ["gpt-oss-120b-full"] and dep["entrypoint"] == "flows/benchmark.py:benchmark"

    again = CliRunner().invoke(app, ["add-teacher", "gpt-oss-120b-full", "--traces", str(new),
                                     "--spec", str(tmp_path / "demo.yaml")])
    assert again.exit_code != 0 and "already" in again.output
    gen = CliRunner().invoke(app, ["add-teacher", "qwen3-8b", "--model", "Qwen/Qwen3-8B",
                                   "--spec", str(tmp_path / "demo.yaml"), "--prefect-file", str(tmp_path / "prefect.yaml")])
    assert gen.exit_code == 0, gen.output
    assert load_spec(tmp_path / "demo.yaml").teacher("qwen3-8b").generate is not None
