"""`legival ingest --from hf`: Hugging Face datasets (legival_core/readers/sources/hf_dataset.py).

How the inputs were made (the `made` fixture, once per module): 10 real traces (6 of
examples/data/gsm8k_gpt-oss-120b_200.jsonl, with an answer text, and 4 of gsm8k_md_eval_cot_5teachers.jsonl,
whose answer is null) were put into a `datasets.Dataset` with `Dataset.from_list` under the column names
such datasets use (question, thinking, output, answer, model, is_correct, and `dataset` = "openai/gsm8k",
a hub name) and written by the `datasets` library itself: `save_to_disk` (a Dataset), a `DatasetDict`
of two splits `save_to_disk`, `to_parquet` (with other column names, read through --map), `to_json`,
`to_csv`, and the `.arrow` file `save_to_disk` wrote. Bad inputs are datasets made the same way with
one value damaged (a null, a number where text is expected). The same 10 traces are also written as
Legi-Val's own JSONL, the reference every reading is compared with.
"""

from __future__ import annotations

import importlib.util
import json
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from legival_core.datasets.base import grader_key
from legival_core.store import Store
from tests._cli import Ran, legival
from tests._sql import rows
from tests.conftest import EXAMPLES

INSTALL = "pip install -e '.[hf]'"
RENAME = {"problem": "question", "reasoning": "thinking", "response": "output", "gold_answer": "answer",
          "correct": "is_correct"}
"""Our field -> the column the made datasets hold it in (names `DEFAULT_COLUMNS` tries)."""
ODD = {"problem": "prompt_text", "reasoning": "cot", "response": "final", "gold_answer": "label",
       "model": "llm", "problem_id": "qid"}
"""Columns no default finds (keys: our JSONL's names): the Parquet file is read with `--map` of these."""


@dataclass(frozen=True)
class Made:
    dir: Path
    ours: Path
    saved: Path
    split_dict: Path
    odd_parquet: Path
    ours_parquet: Path
    jsonl: Path
    csv: Path
    arrow: Path
    records: list[dict[str, Any]]


def _traces() -> list[dict[str, Any]]:
    keep = ("model", "dataset", "problem_id", "problem", "gold_answer", "reasoning", "response", "correct", "truncated")
    lines = [*(EXAMPLES / "gsm8k_gpt-oss-120b_200.jsonl").read_text().splitlines()[:6],
             *(EXAMPLES / "gsm8k_md_eval_cot_5teachers.jsonl").read_text().splitlines()[:4]]
    return [{k: json.loads(ln).get(k) for k in keep} for ln in lines]


@pytest.fixture(scope="module")
def made(tmp_path_factory: pytest.TempPathFactory) -> Made:
    datasets = pytest.importorskip("datasets", reason=INSTALL)
    datasets.disable_progress_bars()
    d = tmp_path_factory.mktemp("hf")
    records = _traces()
    ours = d / "ours.jsonl"
    ours.write_text("".join(json.dumps({k: v for k, v in r.items() if v is not None}) + "\n" for r in records))
    table = [{RENAME.get(k, k): v for k, v in r.items()} | {"dataset": "openai/gsm8k"} for r in records]
    ds = datasets.Dataset.from_list(table)
    ds.save_to_disk(str(d / "saved"))
    datasets.DatasetDict({"train": ds.select(range(4)), "test": ds.select(range(4, 10))}).save_to_disk(str(d / "dict"))
    odd = datasets.Dataset.from_list([{ODD.get(k, k): v for k, v in r.items() if k != "dataset"} for r in records])
    odd.to_parquet(str(d / "odd.parquet"))
    datasets.Dataset.from_list(records).to_parquet(str(d / "ours_hf.parquet"))
    (d / "files").mkdir()
    ds.to_parquet(str(d / "files" / "train.parquet"))
    ds.to_json(str(d / "rows.jsonl"))
    ds.to_csv(str(d / "rows.csv"), index=False)
    (arrow,) = (d / "saved").glob("*.arrow")
    return Made(d, ours, d / "saved", d / "dict", d / "odd.parquet", d / "ours_hf.parquet", d / "rows.jsonl",
                d / "rows.csv", arrow, records)


def _ingest(db: Path, *args: str | Path) -> Ran:
    return legival("ingest", *map(str, args), "--db", str(db))


def _stored(db: Path) -> list[tuple[Any, ...]]:
    with Store(db, read_only=True) as s:
        return rows(s, "SELECT t.trace_id, t.teacher, t.dataset, t.problem_id, p.question, p.gold, t.reasoning, "
                       "t.answer_text, t.truncated, t.source_correct FROM traces t JOIN problems p "
                       "USING (dataset, problem_id) ORDER BY t.trace_id")


def _metrics(db: Path) -> list[tuple[Any, ...]]:
    with Store(db, read_only=True) as s:
        return rows(s, "SELECT trace_id, metric, params, code_version, value, method, status, detail "
                       "FROM trace_metrics ORDER BY ALL")


def test_a_saved_dataset_is_stored_as_it_holds_it_field_by_field(made: Made, tmp_path: Path) -> None:
    import datasets

    db = tmp_path / "s.duckdb"
    r = _ingest(db, made.saved)
    assert r.returncode == 0, r.stderr
    assert f"{made.saved}: read as hf (--from auto)" in r.stderr
    assert r.summary()["files"][0] | {"format": "hf", "new_traces": 10, "bad_lines": 0} == r.summary()["files"][0]
    stored = {(t[1], t[3]): t for t in _stored(db)}
    source = datasets.load_from_disk(str(made.saved))
    assert len(stored) == len(source) == 10
    for row in source:
        _tid, teacher, dataset, pid, question, gold, reasoning, answer, truncated, correct = stored[
            (row["model"], row["problem_id"])]
        assert (teacher, dataset, pid) == (row["model"], "gsm8k", row["problem_id"])
        assert (question, gold) == (row["question"], row["answer"])
        assert (reasoning, answer) == (row["thinking"], row["output"] or "")
        assert (truncated, correct) == (bool(row["truncated"]), row["is_correct"])
    with Store(db, read_only=True) as s:  # graded by our grader, every one
        assert rows(s, "SELECT count(DISTINCT trace_id) FROM grades WHERE grader = ?", [grader_key("gsm8k")]) == [(10,)]
    again = _ingest(db, made.saved)
    assert again.returncode == 0 and again.summary()["new_traces"] == 0 and again.summary()["already_stored"] == 10


def test_our_jsonl_and_the_dataset_give_identical_metric_rows(made: Made, tmp_path: Path) -> None:
    dbs = {"ours": (made.ours,), "hf": (made.saved,)}
    for name, args in dbs.items():
        assert _ingest(tmp_path / f"{name}.duckdb", *args).returncode == 0
        eff = legival("efficiency", "--db", str(tmp_path / f"{name}.duckdb"))
        assert eff.returncode == 0, eff.stderr
    ours, hf = _metrics(tmp_path / "ours.duckdb"), _metrics(tmp_path / "hf.duckdb")
    assert len(ours) >= 10 * 3 and ours == hf
    assert _stored(tmp_path / "ours.duckdb") == _stored(tmp_path / "hf.duckdb")


@pytest.mark.parametrize("how", ["dict:test", "odd.parquet --map", "rows.jsonl", "rows.csv", "arrow", "teacher",
                                 "folder of files"])
def test_every_kind_of_input_stores_the_same_traces(made: Made, tmp_path: Path, how: str) -> None:
    ref, db = tmp_path / "ref.duckdb", tmp_path / "s.duckdb"
    expected = [made.records[i] for i in range(4, 10)] if how == "dict:test" else made.records
    (tmp_path / "ref.jsonl").write_text("".join(
        json.dumps({k: v for k, v in r.items() if v is not None} | ({"model": "mine"} if how == "teacher" else {}))
        + "\n" for r in expected))
    assert _ingest(ref, tmp_path / "ref.jsonl").returncode == 0
    args: tuple[str | Path, ...] = {
        "dict:test": (f"{made.split_dict}:test",),
        "odd.parquet --map": (made.odd_parquet, "--dataset", "gsm8k", "--map",
                              ",".join(f"{'teacher' if k == 'model' else k}={v}" for k, v in ODD.items())),
        "rows.jsonl": (made.jsonl, "--from", "hf"),
        "rows.csv": (made.csv, "--from", "datasets"),
        "arrow": (made.arrow,),
        "teacher": (made.saved, "--teacher", "mine"),
        "folder of files": (made.ours_parquet.parent / "files", "--from", "hf"),  # load_dataset(DIR)
    }[how]
    r = _ingest(db, *args)
    assert r.returncode == 0, r.stderr
    assert r.summary()["files"][0]["format"] == "hf"
    assert _stored(db) == _stored(ref)


def test_a_split_must_be_chosen_among_those_there_are(made: Made, tmp_path: Path) -> None:
    db = tmp_path / "s.duckdb"
    _ingest(db, made.split_dict).error(f"{made.split_dict}: holds the splits train, test: choose one as "
                                       f"{made.split_dict}:SPLIT")
    _ingest(db, f"{made.split_dict}:validation").error("has no split 'validation' (its splits: train, test)")
    _ingest(db, f"{made.saved}:test").error("holds one Dataset", "without ':test'")
    assert not db.exists() or not _stored(db)


def test_auto_takes_a_datasets_parquet_only_when_its_columns_are_not_ours(made: Made, tmp_path: Path) -> None:
    """A Parquet file `datasets` wrote with our own columns is ours (our reader reads it the same);
    one with other columns is a dataset; JSONL is never taken for one by `auto` (say --from hf)."""
    theirs = _ingest(tmp_path / "a.duckdb", made.odd_parquet, "--dataset", "gsm8k")
    theirs.error(f"{made.odd_parquet}: no column for problem (looked for problem, question, prompt; the columns: "
                 "llm, qid, prompt_text, label, cot, final, correct, truncated): give --map problem=COLUMN")
    ours = _ingest(tmp_path / "b.duckdb", made.ours_parquet)
    assert ours.returncode == 0 and ours.summary()["files"][0]["format"] == "legival", ours.stderr
    assert _stored(tmp_path / "b.duckdb") == _stored(_reference(made, tmp_path))
    jsonl = _ingest(tmp_path / "c.duckdb", made.jsonl)
    jsonl.error(f"{made.jsonl}:1: field 'gold_answer': required field is missing")  # our reader's


def _reference(made: Made, tmp_path: Path) -> Path:
    db = tmp_path / "ref.duckdb"
    if not db.exists():
        assert _ingest(db, made.ours).returncode == 0
    return db


@pytest.mark.parametrize(("args", "expect"), [
    (("--map", "reasoning=steps"), "--map reasoning=steps: no column 'steps' (the columns: model, dataset, "
                                   "problem_id, question, answer, thinking, output, is_correct, truncated)"),
    (("--dataset", "gsm9k"), "--dataset: unknown dataset 'gsm9k'"),
    (("--requests", "r.jsonl"), "which takes no --requests"),
])
def test_bad_options_are_one_line(made: Made, tmp_path: Path, args: tuple[str, ...], expect: str) -> None:
    (tmp_path / "r.jsonl").write_text("{}\n")
    r = legival("ingest", str(made.saved), "--db", str(tmp_path / "s.duckdb"), *args, cwd=tmp_path)
    r.error(f"{made.saved}", expect)


@pytest.mark.parametrize(("column", "value", "expect", "bad"), [
    ("thinking", None, "row 3: field 'thinking': is empty (null) (the trace's reasoning), and so is 'output'", 1),
    ("question", None, "row 3: field 'question': is empty (null) (the trace's problem)", 1),
    ("problem_id", None, "row 3: field 'problem_id': is empty (null)", 1),
    ("model", None, "row 3: field 'model': is empty (null): give --teacher NAME", 1),
    ("dataset", "openai/gsm9000", "row 3: field 'dataset': task 'openai/gsm9000' maps to no registered dataset", 1),
    ("answer", [1, 2], "row 1: field 'answer': expected text or a number, got list [18] (the trace's gold_answer)",
     10),  # a column's type is the column's: every row of it is wrong
])
def test_a_damaged_row_is_named_and_skip_bad_skips_it(made: Made, tmp_path: Path, column: str, value: Any,
                                                      expect: str, bad: int) -> None:
    import datasets

    source = datasets.load_from_disk(str(made.saved)).to_list()
    for i, row in enumerate(source):
        if i == 2:
            row[column] = value
        elif isinstance(value, list):
            row[column] = [int(row[column])]
    if column == "thinking":
        source[2]["output"] = None  # no raw output to split either
    bad_dir = tmp_path / "bad"
    datasets.Dataset.from_list(source).save_to_disk(str(bad_dir))
    db = tmp_path / "s.duckdb"
    _ingest(db, bad_dir).error(f"{bad_dir} {expect}")
    assert not db.exists() or not _stored(db)
    r = _ingest(db, bad_dir, "--skip-bad")
    assert r.returncode == 0, r.stderr
    assert r.summary()["new_traces"] == 10 - bad and r.summary()["bad_lines"] == bad
    assert f"skipped: {bad_dir} {expect}" in r.stderr


@pytest.mark.parametrize(("what", "expect"), [
    ("cut.arrow", "cut.arrow: datasets cannot load it: Expected to be able to read"),
    ("cut.parquet", "cut.parquet: datasets cannot load it: Parquet magic bytes not found in footer"),
    ("notes.txt", "notes.txt: is not a file datasets reads here (a save_to_disk directory, or .arrow, .csv"),
])
def test_an_unreadable_file_is_one_line(made: Made, tmp_path: Path, what: str, expect: str) -> None:
    """Truncated copies of the real files `datasets` wrote, and a file of no format it reads."""
    source = {"cut.arrow": made.arrow, "cut.parquet": made.odd_parquet, "notes.txt": made.ours}[what]
    data = source.read_bytes()
    (tmp_path / what).write_bytes(data[: len(data) // 2])
    r = _ingest(tmp_path / "s.duckdb", tmp_path / what, "--from", "hf")
    assert r.error(expect) and "Failed to read" not in r.stderr  # no log line of the library's


def test_a_hub_name_offline_is_one_line(made: Made, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import datasets

    monkeypatch.setattr(datasets.config, "HF_HUB_OFFLINE", True)  # as HF_DATASETS_OFFLINE=1 at import sets it
    r = _ingest(tmp_path / "s.duckdb", "legival-test/no-such-dataset:test", "--from", "hf", "--dataset", "gsm8k")
    r.error("legival-test/no-such-dataset:test: cannot load the hub dataset 'legival-test/no-such-dataset' (no such "
            "local path, and HF_DATASETS_OFFLINE/HF_HUB_OFFLINE is set)")
    _ingest(tmp_path / "s.duckdb", tmp_path / "missing.parquet", "--from", "hf").error(
        "missing.parquet: no such file or directory")


def test_a_missing_datasets_library_is_one_line_with_the_install_command(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec",
                        lambda name, *a: None if name.split(".")[0] == "datasets" else real(name, *a))
    monkeypatch.setitem(sys.modules, "datasets", None)  # and an import of it would fail
    (tmp_path / "saved").mkdir()
    (tmp_path / "saved" / "state.json").write_text("{}")
    for args in (("--from", "hf"), ()):  # named, and told by its marker file (the sniff imports nothing)
        r = _ingest(tmp_path / "s.duckdb", tmp_path / "saved", *args)
        r.error(f"{tmp_path / 'saved'}: reading hf files needs the datasets library, which is not installed: "
                "pip install 'legival[hf]'")


def test_a_spec_teacher_reads_a_dataset_directory_and_a_split(made: Made, tmp_path: Path) -> None:
    """A `save_to_disk` directory and `DIR:SPLIT` are inputs of a spec teacher too (not files: the source
    says they are there, `SourceInfo.present`); a directory that is not there is the spec's error."""
    import yaml

    base = {"store": str(tmp_path / "s.duckdb"), "datasets": ["gsm8k"], "report": {"out": str(tmp_path / "r")},
            "transfer": {"enabled": False}}
    spec = tmp_path / "spec.yaml"
    spec.write_text(yaml.safe_dump({**base, "teachers": [
        {"name": "saved", "format": "hf", "traces": [str(made.saved)]},
        {"name": "split", "format": "hf", "traces": [f"{made.split_dict}:test"]}]}))
    r = legival("plan", str(spec))
    assert r.returncode == 0, r.stderr
    spec.write_text(yaml.safe_dump({**base, "teachers": [
        {"name": "gone", "format": "hf", "traces": [str(tmp_path / "no-such-dir")]}]}))
    r = legival("plan", str(spec))
    r.error("spec.yaml")
    assert "teachers.0.traces: trace file(s) not found" in r.stderr
