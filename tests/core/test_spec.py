"""The benchmark spec: what validates, and messages that say what to fix."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
import yaml

from legival_core.run_config import SpecError, load_spec, parse_spec
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
    from legival_core.run_config import Student, Transfer, student_config

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


def test_every_model_config_loads_and_names_its_source() -> None:
    """configs/models: each file validates, is named after its stem, names one model no other file
    names (the lookup by model id is unambiguous), and says where its sampling comes from."""
    from legival_core.generation.config import CONFIG_DIR, ModelConfig, load_model_config

    files = sorted(CONFIG_DIR.glob("*.yaml"))
    assert len(files) >= 19
    models: dict[str, str] = {}
    for f in files:
        text = f.read_text()
        cfg = ModelConfig.model_validate(yaml.safe_load(text))
        assert cfg.name == f.stem, f
        assert text.startswith("#"), f"{f.name}: say the sampling's source in a comment"
        assert cfg.model not in models, f"{f.name} and {models.get(cfg.model)} both name {cfg.model}"
        models[cfg.model] = f.name
        assert load_model_config(None, cfg.model) == cfg  # a spec teacher's `model` finds its config
    paper = {"Qwen/QwQ-32B", "Qwen/Qwen3-4B", "Qwen/Qwen3-8B", "Qwen/Qwen3-32B", "Qwen/Qwen3-0.6B",
             "deepseek-ai/DeepSeek-R1-Distill-Qwen-32B", "deepseek-ai/DeepSeek-R1-0528", "google/gemma-3-12b-it",
             "google/gemma-3-27b-it", "mistralai/Magistral-Small-2509", "nvidia/Llama-3.1-Nemotron-Nano-8B-v1",
             "nvidia/OpenReasoning-Nemotron-32B", "openai/gpt-oss-20b", "openai/gpt-oss-120b",
             "microsoft/Phi-3.5-mini-instruct", "meta-llama/Llama-3.2-1B-Instruct",
             "microsoft/Phi-3-mini-128k-instruct"}
    assert paper <= set(models)


def test_paper_spec_validates_and_is_the_papers_matrix() -> None:
    from legival_core.generation.config import load_model_config
    from legival_core.plan.throughput import load_table

    s = load_spec(REPO / "examples" / "paper.yaml")
    assert s.datasets == ["math", "gpqa", "connections"]
    assert [(st.backend, st.model) for st in s.students] == [
        ("vllm", "microsoft/Phi-3.5-mini-instruct"), ("vllm", "meta-llama/Llama-3.2-1B-Instruct")]
    assert len(s.teachers) == 13 and s.execution.ray_address == "auto" and s.execution.gpus_per_engine == 1
    table = load_table()
    for t in s.teachers:
        g = t.generate
        assert g is not None and g.backend == "vllm" and g.max_new_tokens == 8192, t.name
        assert [d for d, _ in g.jobs(s.datasets, t.name)] == s.datasets
        assert load_model_config(g.config, g.model).name == t.name  # its configs/models entry
        assert table.params_b(g.model) is not None, t.name
    assert s.judge.name == "gemini" and s.rewards.enabled and s.monitor.enabled
    assert [m.name for m in s.rewards.specs()] == ["skywork-v2-llama-8b", "rb2-llama-8b", "qwen2.5-math-prm-7b"]
    sup = s.supervisor()
    assert (sup.backend, sup.model) == ("vllm", "meta-llama/Llama-3.2-1B-Instruct")
    assert sup.options["max_model_len"] == 16384


def test_rewards_and_monitor_sections(tmp_path: Path) -> None:
    """Off by default; reward models by default name, hub id or mapping; the supervisor is a spec
    student or any model (the shipped CPU models by any spelling)."""
    from legival_core.catalog import GEMMA3_270M, SMOLLM2
    from legival_core.rewards import DEFAULT_MODELS
    from legival_core.run_config import Monitor, Rewards, default_of

    s = parse_spec(_base(tmp_path), tmp_path)
    assert not s.rewards.enabled and not s.monitor.enabled
    assert [m.name for m in s.rewards.specs()] == [m.name for m in DEFAULT_MODELS]
    assert default_of(Rewards, "max_length") == DEFAULT_MODELS[0].max_length

    r = parse_spec(_base(tmp_path) | {"rewards": {"enabled": True, "max_length": 4096, "models": [
        "rb2-llama-8b", "Skywork/Skywork-Reward-V2-Llama-3.1-8B", "org/Other-RM",
        {"name": "mine", "model": "org/mine", "kind": "prm", "path": "weights/mine"}]}}, tmp_path).rewards
    specs = {m.name: m for m in r.specs()}
    assert list(specs) == ["rb2-llama-8b", "skywork-v2-llama-8b", "other-rm", "mine"]
    assert specs["other-rm"].model == "org/Other-RM" and specs["other-rm"].kind == "scalar"
    assert specs["mine"].kind == "prm" and specs["mine"].path == str((tmp_path / "weights" / "mine").resolve())
    assert {m.max_length for m in specs.values()} == {4096}
    assert specs["rb2-llama-8b"].params()["max_length"] == 4096  # part of the rows' key
    with pytest.raises(SpecError, match="duplicate reward model"):
        parse_spec(_base(tmp_path) | {"rewards": {"models": ["rb2-llama-8b", "allenai/Llama-3.1-8B-Instruct-RM-RB2"]}},
                   tmp_path)
    with pytest.raises(SpecError, match=r"rewards.models.0: .*not a default.*give its `model`"):
        parse_spec(_base(tmp_path) | {"rewards": {"models": [{"name": "nope"}]}}, tmp_path)

    student = {"name": "sup", "backend": "vllm", "model": "Qwen/Qwen3-0.6B", "dtype": "bfloat16",
               "backend_options": {"max_model_len": 4096}}
    m = parse_spec(_base(tmp_path) | {"students": [student], "monitor": {"enabled": True, "supervisor": "sup"}},
                   tmp_path)
    assert m.supervisor() == type(m.supervisor())("sup", "vllm", "Qwen/Qwen3-0.6B", "bfloat16", {"max_model_len": 4096})
    cpu = Monitor()
    assert (cpu.supervisor, cpu.resolve([]).backend, cpu.resolve([]).model) == ("smollm2-135m", "embedded", SMOLLM2)
    assert Monitor(supervisor="gemma-3-270m").resolve([]).model == GEMMA3_270M
    assert Monitor(supervisor="g", model="gemma3-270m").resolve([]).model_id == GEMMA3_270M
    with pytest.raises(SpecError, match="monitor.backend"):
        parse_spec(_base(tmp_path) | {"monitor": {"backend": "nope"}}, tmp_path)
    with pytest.raises(SpecError, match="runs dtype"):
        parse_spec(_base(tmp_path) | {"monitor": {"dtype": "float16"}}, tmp_path)
    with pytest.raises(SpecError, match=r"monitor: unknown key\(s\) supervisr"):
        parse_spec(_base(tmp_path) | {"monitor": {"supervisr": "x"}}, tmp_path)


def test_early_answering_readers_are_the_generating_teachers_own_models(tmp_path: Path) -> None:
    """`transfer.early_answering`: each teacher whose `generate` model runs as a text backend gets the
    reader `early-<teacher>` on that model, reading its traces only; a chat-endpoint teacher and a
    trace-file teacher are named with why; a student of that name wins; `teachers:` must name teachers."""
    data = _base(tmp_path)
    gen = {"backend": "embedded", "model": "smollm2-135m", "problems": "t.jsonl", "backend_options": {"dtype": "bfloat16"}}
    chat = {"backend": "openai", "model": "served", "problems": "t.jsonl", "base_url": "http://127.0.0.1:9"}
    data["teachers"] += [{"name": "g", "generate": gen}, {"name": "c", "generate": chat}]
    data["transfer"] = {"early_answering": True}
    s = parse_spec(data, tmp_path)
    readers = [st for st in s.transfer_students() if st.mode == "early_answer"]
    assert [(r.name, r.teachers, r.dtype, r.backend) for r in readers] == [("early-g", ["g"], "bfloat16", "embedded")]
    from legival_core.catalog import canonical_model

    assert readers[0].model == canonical_model("smollm2-135m")  # the teacher's model, as a student spells it
    assert readers[0].reads("g") and not readers[0].reads("a") and s.students[0].reads("a")
    skipped = s.early_answering_skipped()
    assert set(skipped) == {"a", "c"} and "chat endpoint" in skipped["c"] and "mode: early_answer" in skipped["a"]
    mine = {"name": "early-g", "model": "smollm2-135m", "mode": "early_answer", "teachers": ["g"]}
    s2 = parse_spec({**data, "students": [{"name": "s"}, mine]}, tmp_path)
    assert [st.name for st in s2.transfer_students()] == ["s", "early-g"] and s2.transfer_students()[1].dtype == "float32"
    assert [st.name for st in parse_spec({**data, "transfer": {}}, tmp_path).transfer_students()] == ["smollm2-135m"]
    with pytest.raises(SpecError, match=r"student 'x': teachers: no teacher 'nope' \(teachers: a, g, c\)"):
        parse_spec({**data, "students": [{"name": "x", "teachers": ["nope"]}]}, tmp_path)
    with pytest.raises(SpecError, match="mode"):
        parse_spec({**data, "students": [{"name": "x", "mode": "early"}]}, tmp_path)
