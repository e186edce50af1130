"""lm-evaluation-harness `--log_samples` output as a trace source (`--from lm-eval`,
legival_core/readers/sources/lm_eval_samples.py), on files the real lm-eval CLI writes.

The module runs `python -m lm_eval` ONCE (`lm_eval_run`): four local tasks over local files (no hub):
`gsm8k_local` (a task YAML over the first 3 GSM8K test problems, gsm8k's two filters), `gsm8k_local_maj`
(the same with `repeats: 2`, sampled, majority vote), `hendrycks_math_local` and `gpqa_diamond_local`
(lm-eval's own hendrycks_math and gpqa cot-zeroshot YAMLs, with their `process_docs`, included over our
MATH-500 and GPQA fixtures; minerva_math needs antlr4 4.11, which math-verify's 4.13 excludes), with the
SmolLM2 model this project ships, `--limit 3`, 32 new tokens. One model load (~2 s); the run takes 23-41 s
on the shared 2-core machine (start and task indexing ~8 s, generation ~14 s; one OpenMP thread: the default
two were 6 times slower under load). Everything else reads copies of that output, damaged where a test says.
"""

from __future__ import annotations

import gzip
import importlib.util
import json
import os
import shutil
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from legival_core.store import Store
from legival_core.thinking import split_thinking
from tests._cli import legival
from tests._sql import rows
from tests.conftest import EXAMPLES, FIXTURES

TASKS = ("gsm8k_local", "hendrycks_math_local", "gpqa_diamond_local")
REPEATED = "gsm8k_local_maj"
"""The GSM8K task again with `repeats: 2` (sampled) and a majority-vote filter: two generations per doc."""
GSM8K_ROWS = FIXTURES / "datasets" / "gsm8k" / "test.jsonl"
"""The first rows of the GSM8K test set (tests/fixtures/datasets/README.md)."""
MATH_ROWS = FIXTURES / "datasets" / "math" / "math500_test.jsonl"
GPQA_ROWS = FIXTURES / "datasets" / "gpqa.csv"
INSTALL = "pip install -e '.[lm-eval]'"

GSM8K_TASK = """task: gsm8k_local
dataset_path: json
dataset_kwargs:
  data_files:
    test: {data}
output_type: generate_until
test_split: test
doc_to_text: "Question: {{{{question}}}}\\nAnswer:"
doc_to_target: "{{{{answer.split('####')[-1].strip()}}}}"
metric_list:
  - metric: exact_match
    aggregation: mean
    higher_is_better: true
generation_kwargs:
  until: ["Question:"]
  do_sample: false
filter_list:
  - name: strict-match
    filter:
      - function: regex
        regex_pattern: "#### (\\\\-?[0-9\\\\.\\\\,]+)"
      - function: take_first
  - name: flexible-extract
    filter:
      - function: regex
        group_select: -1
        regex_pattern: "(-?[$0-9.,]{{2,}})|(-?[0-9]+)"
      - function: take_first
"""

REPEATED_TASK = GSM8K_TASK.replace("task: gsm8k_local", f"task: {REPEATED}").replace(
    "  do_sample: false\n", "  do_sample: true\n  temperature: 1.0\nrepeats: 2\n").split("filter_list:")[0] + """\
filter_list:
  - name: maj@2
    filter:
      - function: regex
        regex_pattern: "(-?[0-9]+)"
      - function: majority_vote
      - function: take_first
"""

INCLUDED_TASKS = {
    "hendrycks_math_local": """include: {tasks}/hendrycks_math/hendrycks_math_algebra.yaml
task: hendrycks_math_local
tag: []
dataset_path: json
dataset_name: null
dataset_kwargs:
  data_files:
    test: {math}
training_split: null
test_split: test
""",
    "gpqa_diamond_local": """include: {tasks}/gpqa/cot_zeroshot/_gpqa_cot_zeroshot_yaml
task: gpqa_diamond_local
tag: []
dataset_path: csv
dataset_name: null
dataset_kwargs:
  data_files:
    train: {gpqa}
""",
}


def run_lm_eval(work: Path, tasks: tuple[str, ...] = (*TASKS, REPEATED), limit: int = 3,
                new_tokens: int = 32) -> dict[str, Path]:
    """Run the real lm-eval CLI offline on local task YAMLs written into `work`; the samples file of
    each task (its results JSON beside it). Also used by benchmarks/source_lm_eval_samples.py."""
    from legival_core.backends.smollm2 import ModelNotInstalled, smollm2_safetensors_dir

    try:
        model = smollm2_safetensors_dir()
    except ModelNotInstalled as e:
        pytest.skip(str(e))
    spec = importlib.util.find_spec("lm_eval")
    assert spec is not None and spec.origin is not None
    lm_tasks = Path(spec.origin).parent / "tasks"
    yamls = work / "tasks"
    yamls.mkdir(parents=True, exist_ok=True)
    gsm8k = work / "gsm8k_test_first3.jsonl"  # real GSM8K test problems
    gsm8k.write_text("".join(GSM8K_ROWS.read_text(encoding="utf-8").splitlines(True)[:limit]), encoding="utf-8")
    (yamls / "gsm8k_local.yaml").write_text(GSM8K_TASK.format(data=gsm8k), encoding="utf-8")
    (yamls / f"{REPEATED}.yaml").write_text(REPEATED_TASK.format(data=gsm8k), encoding="utf-8")
    for name, text in INCLUDED_TASKS.items():
        (yamls / f"{name}.yaml").write_text(text.format(tasks=lm_tasks, math=MATH_ROWS, gpqa=GPQA_ROWS),
                                            encoding="utf-8")
    out = work / "out"
    env = {**os.environ, "HF_DATASETS_OFFLINE": "1", "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1",
           "HF_DATASETS_CACHE": str(work / "hf-datasets"), "OMP_NUM_THREADS": "1", "TOKENIZERS_PARALLELISM": "false"}
    cmd = [sys.executable, "-m", "lm_eval", "--model", "hf", "--model_args", f"pretrained={model},dtype=float32",
           "--device", "cpu", "--include_path", str(yamls), "--tasks", ",".join(tasks), "--limit", str(limit),
           "--log_samples", "--output_path", str(out), "--gen_kwargs", f"max_gen_toks={new_tokens}",
           "--batch_size", str(limit * (len(tasks) + 1))]
    t0 = time.perf_counter()
    p = subprocess.run(cmd, env=env, cwd=work, capture_output=True, text=True, timeout=900)
    assert p.returncode == 0, p.stderr[-4000:]
    print(f"lm_eval: {time.perf_counter() - t0:.1f} s")
    found = {t: [f for f in out.glob("*/samples_*.jsonl") if f.name[len("samples_"):f.name.rfind("_")] == t]
             for t in tasks}
    assert all(len(f) == 1 for f in found.values()), found
    return {t: f[0] for t, f in found.items()}


@pytest.fixture(scope="module")
def lm_eval_run(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    pytest.importorskip("lm_eval", reason=INSTALL)
    return run_lm_eval(tmp_path_factory.mktemp("lm-eval"))


def samples(path: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines()]


def results_of(path: Path) -> dict[str, Any]:
    (res,) = path.parent.glob(f"results_{path.name.rsplit('_', 1)[1].removesuffix('.jsonl')}.json")
    out: dict[str, Any] = json.loads(res.read_text(encoding="utf-8"))
    return out


def first_filter(path: Path) -> list[dict[str, Any]]:
    """The lines of the file's first filter: one per doc (the others repeat the generation)."""
    lines = samples(path)
    return [s for s in lines if s["filter"] == lines[0]["filter"]]


def copy_run(path: Path, to: Path, name: str | None = None) -> Path:
    """The samples file and its results JSON copied into `to` (the samples file renamed to `name`)."""
    to.mkdir(parents=True, exist_ok=True)
    for res in path.parent.glob("results_*.json"):
        shutil.copy(res, to / res.name)
    return Path(shutil.copy(path, to / (name or path.name)))


def _gpqa_prompt(question: str, choices: list[str]) -> str:
    """Our GPQA problem text over lm-eval's order of the options (legival_core/datasets/gpqa.py)."""
    from legival_core.datasets.gpqa import format_question

    return format_question(question.strip(), tuple(choices))


def expected(path: Path) -> dict[str, tuple[Any, ...]]:
    """What the samples file holds, as our trace fields, by problem id (module docstring of the source)."""
    model = results_of(path)["model_name"]
    math_gold = {r["unique_id"]: r["answer"] for r in map(json.loads, MATH_ROWS.read_text().splitlines())}
    out = {}
    for s in first_filter(path):
        doc, raw = s["doc"], s["resps"][0][0]
        verdict = bool(s[s["metrics"][0]])
        if "question" in doc:  # GSM8K: the number after ####
            gold = doc["answer"].split("####")[-1].strip()
            pid, problem, choices, ds = f"gsm8k_local-{s['doc_id']}", doc["question"], None, "gsm8k"
        elif "unique_id" in doc:  # MATH-500: the dataset's own answer, not lm-eval's rewrite of it
            pid, problem, gold, choices, ds = doc["unique_id"], doc["problem"], math_gold[doc["unique_id"]], None, "math"
        else:  # GPQA: the letter of lm-eval's (A)-(D) in its order of the options
            pid, problem, gold = doc["Record ID"], _gpqa_prompt(doc["Question"], doc["choices"]), doc["answer"].strip("()")
            choices, ds = json.dumps(doc["choices"]), "gpqa"
        split = split_thinking(raw)
        out[pid] = (model, ds, problem, gold, choices, split.reasoning, split.answer_text, verdict)
    return out


def stored(db: Path) -> dict[str, tuple[Any, ...]]:
    with Store(db, read_only=True) as s:
        got = rows(s, "SELECT t.problem_id, t.teacher, t.dataset, p.question, p.gold, p.choices, t.reasoning, "
                      "t.answer_text, t.source_correct FROM traces t JOIN problems p USING (dataset, problem_id)")
    # GPQA's id is our loader's gpqa-<Record ID>, with the hash of lm-eval's order of the options when it is not ours
    return {(pid.removeprefix("gpqa-").split("@")[0] if ds == "gpqa" else pid): (t, ds, *rest)
            for pid, t, ds, *rest in got}


@pytest.fixture(scope="module")
def ingested(lm_eval_run: dict[str, Path], tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Any]:
    """The three samples files ingested by `--from auto` into one store (a template: tests copy it)."""
    db = tmp_path_factory.mktemp("ingested") / "lm.duckdb"
    r = legival("ingest", *(lm_eval_run[t] for t in TASKS), "--db", db)
    assert r.returncode == 0, r.stderr
    return db, r


@pytest.mark.slow
def test_stored_traces_equal_what_the_samples_hold(lm_eval_run: dict[str, Path], ingested: tuple[Path, Any]) -> None:
    db, r = ingested
    for t in TASKS:
        assert f"{lm_eval_run[t]}: read as lm-eval (--from auto)" in r.stderr
    assert [x["format"] for x in r.summary()["files"]] == ["lm-eval"] * 3
    got = stored(db)
    want = {k: v for t in TASKS for k, v in expected(lm_eval_run[t]).items()}
    assert len(want) == 9 and got == want
    # every trace graded by our graders; the GSM8K golds are the real ones of the dataset's file
    with Store(db, read_only=True) as s:
        assert rows(s, "SELECT count(*) FROM grades")[0][0] == 9
    gsm8k = [json.loads(x) for x in GSM8K_ROWS.read_text().splitlines()[:3]]
    assert [got[f"gsm8k_local-{i}"][3] for i in range(3)] == [g["answer"].split("#### ")[1] for g in gsm8k]


@pytest.mark.slow
def test_problems_line_up_with_our_loaders(lm_eval_run: dict[str, Path], ingested: tuple[Path, Any],
                                           tmp_path: Path) -> None:
    """MATH-500 docs keep `unique_id`: the problems are our MATH loader's, gold included. A task over the
    public GSM8K (`dataset_path: openai/gsm8k`, here a copy whose results JSON says so) gets our GSM8K
    loader's ids `gsm8k-test-<row>`, and the local file holds the test set's first rows: the same problems."""
    from legival_core.datasets.base import get_dataset

    with Store(ingested[0], read_only=True) as s:
        math = rows(s, "SELECT problem_id, question, gold FROM problems WHERE dataset = 'math' ORDER BY 1")
    ours = {p.problem_id: (p.problem_id, p.question, p.gold) for p in get_dataset("math").load(MATH_ROWS)}
    assert len(math) == 3 and math == [ours[pid] for pid, *_ in math]
    with Store(ingested[0], read_only=True) as s:
        gpqa = rows(s, "SELECT problem_id, choices FROM problems WHERE dataset = 'gpqa'")
    by_id = {p.problem_id: list(p.choices) for p in get_dataset("gpqa").load(GPQA_ROWS)}
    for pid, choices in gpqa:  # our loader's id where lm-eval's order of the options is ours, else a variant
        base = pid.split("@")[0]
        assert (pid == base) == (json.loads(choices) == by_id[base]), (pid, choices, by_id[base])
    assert len(gpqa) == 3
    # a doc whose options lm-eval happened to order as we do is our loader's problem itself
    ours_gpqa = {p.problem_id: p for p in get_dataset("gpqa").load(GPQA_ROWS)}
    ours_first = ours_gpqa["gpqa-recTEST0001"]
    f = copy_run(lm_eval_run["gpqa_diamond_local"], tmp_path / "gpqa")
    _damage_line(1, lambda s: s["doc"].update(choices=list(ours_first.choices), answer=f"({ours_first.gold})"))(f)
    assert legival("ingest", f, "--db", tmp_path / "g.duckdb").returncode == 0
    with Store(tmp_path / "g.duckdb", read_only=True) as s:
        got = rows(s, "SELECT question, gold, choices FROM problems WHERE problem_id = 'gpqa-recTEST0001'")
    assert got == [(ours_first.question, ours_first.gold, json.dumps(list(ours_first.choices)))]
    f = copy_run(lm_eval_run["gsm8k_local"], tmp_path / "run")
    _damage_results(lambda d: d["configs"]["gsm8k_local"].update(dataset_path="openai/gsm8k"))(f)
    assert legival("ingest", f, "--db", tmp_path / "s.duckdb").returncode == 0
    with Store(tmp_path / "s.duckdb", read_only=True) as s:
        gsm8k = rows(s, "SELECT problem_id, question, gold FROM problems ORDER BY 1")
    loaded = [(p.problem_id, p.question, p.gold) for p in get_dataset("gsm8k").load(GSM8K_ROWS)]
    assert gsm8k == loaded[:3] and gsm8k[0][0] == "gsm8k-test-0"


@pytest.mark.slow
def test_reingest_adds_nothing(lm_eval_run: dict[str, Path], ingested: tuple[Path, Any], tmp_path: Path) -> None:
    db = Path(shutil.copy(ingested[0], tmp_path / "again.duckdb"))
    r = legival("ingest", *(lm_eval_run[t] for t in TASKS), "--db", db, "--from", "lm_eval")
    assert r.returncode == 0, r.stderr
    assert (r.summary()["new_traces"], r.summary()["already_stored"]) == (0, 9)


def _our_jsonl(files: dict[str, Path], ids: dict[str, str], to: Path) -> Path:
    """The same traces written as Legi-Val's own JSONL records (the raw output in `response`); `ids`: the
    stored GPQA ids by Record ID (they carry a hash of lm-eval's order of the options)."""
    math_gold = {r["unique_id"]: r["answer"] for r in map(json.loads, MATH_ROWS.read_text().splitlines())}
    recs = []
    for f in (files[t] for t in TASKS):
        model = results_of(f)["model_name"]
        for s in first_filter(f):
            doc = s["doc"]
            rec: dict[str, Any] = {"model": model, "response": s["resps"][0][0]}
            if "question" in doc:
                rec |= {"dataset": "gsm8k", "problem_id": f"gsm8k_local-{s['doc_id']}", "problem": doc["question"],
                        "gold_answer": doc["answer"].split("####")[-1].strip()}
            elif "unique_id" in doc:
                rec |= {"dataset": "math", "problem_id": doc["unique_id"], "problem": doc["problem"],
                        "gold_answer": math_gold[doc["unique_id"]]}
            else:
                rec |= {"dataset": "gpqa", "problem_id": ids[doc["Record ID"]], "choices": doc["choices"],
                        "problem": _gpqa_prompt(doc["Question"], doc["choices"]),
                        "gold_answer": doc["answer"].strip("()")}
            recs.append(rec)
    to.write_text("".join(json.dumps(x) + "\n" for x in recs), encoding="utf-8")
    return to


def _metric_rows(db: Path) -> list[tuple[Any, ...]]:
    with Store(db, read_only=True) as s:
        return sorted(rows(s, "SELECT trace_id, metric, params, value, status FROM trace_metrics"))


@pytest.mark.slow
def test_the_same_traces_from_our_jsonl_give_identical_metric_rows(
        lm_eval_run: dict[str, Path], ingested: tuple[Path, Any], tmp_path: Path) -> None:
    a, b = Path(shutil.copy(ingested[0], tmp_path / "lm.duckdb")), tmp_path / "own.duckdb"
    with Store(a, read_only=True) as s:
        ids = {pid.removeprefix("gpqa-").split("@")[0]: pid
               for (pid,) in rows(s, "SELECT problem_id FROM traces WHERE dataset = 'gpqa'")}
    rb = legival("ingest", _our_jsonl(lm_eval_run, ids, tmp_path / "ours.jsonl"), "--db", b)
    assert rb.returncode == 0, rb.stderr
    assert rb.summary()["files"][0]["format"] == "legival"  # auto: our own JSONL is not taken for lm-eval's
    with Store(a, read_only=True) as sa, Store(b, read_only=True) as sb:
        for q in ("SELECT trace_id, teacher, dataset, problem_id, reasoning, answer_text, truncated FROM traces",
                  "SELECT dataset, problem_id, question, gold, choices FROM problems",
                  "SELECT trace_id, grader, extracted, correct, status FROM grades"):
            assert sorted(rows(sa, q)) == sorted(rows(sb, q)) and len(rows(sa, q)) == 9, q
    for db in (a, b):
        r = legival("efficiency", "--db", db)
        assert r.returncode == 0, r.stderr
    ma, mb = _metric_rows(a), _metric_rows(b)
    assert ma and [m[:3] + m[4:] for m in ma] == [m[:3] + m[4:] for m in mb]
    assert all(x[3] == pytest.approx(y[3], abs=1e-6) for x, y in zip(ma, mb, strict=True))


def _damage_line(n: int, change: Callable[[dict[str, Any]], Any]) -> Callable[[Path], None]:
    def damage(f: Path) -> None:
        lines = samples(f)
        out = change(lines[n - 1])
        lines[n - 1] = lines[n - 1] if out is None else out
        f.write_text("".join(json.dumps(x, ensure_ascii=False) + "\n" for x in lines), encoding="utf-8")
    return damage


def _damage_results(change: Callable[[dict[str, Any]], Any]) -> Callable[[Path], None]:
    def damage(f: Path) -> None:
        (res,) = f.parent.glob("results_*.json")
        data = json.loads(res.read_text(encoding="utf-8"))
        change(data)
        res.write_text(json.dumps(data), encoding="utf-8")
    return damage


def _raw_line(n: int, raw: bytes) -> Callable[[Path], None]:
    def damage(f: Path) -> None:
        lines = f.read_bytes().split(b"\n")
        lines[n - 1] = raw
        f.write_bytes(b"\n".join(lines))
    return damage


def _no_results(f: Path) -> None:
    for res in f.parent.glob("results_*.json"):
        res.unlink()


def _cut_results(f: Path) -> None:
    (res,) = f.parent.glob("results_*.json")
    res.write_bytes(res.read_bytes()[:200])


def _drop(d: dict[str, Any], key: str) -> None:
    del d[key]


BAD = {
    "no results JSON": (_no_results, (), ["no results JSON of its run beside it (results_", "copy it next to"]),
    "results JSON cut short": (_cut_results, (), ["its results JSON", "cannot be read"]),
    "no config of the task": (_damage_results(lambda d: d["configs"].pop("gsm8k_local")), (),
                              ["has no configuration of task 'gsm8k_local'"]),
    "a log-likelihood task": (_damage_results(lambda d: d["configs"]["gsm8k_local"].update(output_type="multiple_choice")),
                              (), ["task 'gsm8k_local' is a multiple_choice task", "no generated text"]),
    "no model named": (_damage_results(lambda d: [d.pop("model_name"), d["config"].pop("model_args")]), (),
                       ["names no model (model_name): give --teacher"]),
    "malformed JSON": (_raw_line(2, b'{"doc_id": 1, "doc": {'), (), [":2: field '<json>': malformed JSON"]),
    "invalid UTF-8": (_raw_line(2, b'{"doc_id": 1, "x": "\xff"}'), (), [":2: field '<encoding>': invalid UTF-8"]),
    "no filter": (_damage_line(1, lambda s: _drop(s, "filter")), (), [":1: field 'filter'"]),
    "doc_id not an index": (_damage_line(2, lambda s: s.update(doc_id="one")), (), [":2: field 'doc_id'"]),
    "doc not an object": (_damage_line(2, lambda s: s.update(doc="Janet")), (), [":2: field 'doc': ", "doc_id 1"]),
    "doc without its gold": (_damage_line(2, lambda s: _drop(s["doc"], "answer")), (),
                             [":2: field 'doc.answer': not in the doc of doc_id 1 (its fields: question)", "--map"]),
    "gold without ####": (_damage_line(2, lambda s: s["doc"].update(answer="about three")), (),
                          [":2: field 'doc.answer': has no '#### <number>' (doc_id 1)"]),
    "resps not generated text": (_damage_line(3, lambda s: s.update(resps=[[["-1.5", "False"]]])), (),
                                 [":3: field 'resps': expected the generated text", "doc_id 2"]),
    "renamed": (None, ("--from", "lm-eval"), ["is not named as lm-eval names a samples file"]),
    "unknown task": (None, (), ["task 'arith' maps to no registered dataset", "give --dataset"]),
    "unknown task, no layout": (None, ("--dataset", "lsat"),
                                ["no layout Legi-Val knows", "--map problem=FIELD,gold_answer=FIELD",
                                 "(the doc's fields: answer, question)"]),
    "unknown task, a mapped field absent": (None, ("--dataset", "gsm8k", "--map", "problem=query"),
                                            [":1: field 'doc.query': not in the doc of doc_id 0 (its fields: "
                                             "answer, question)"]),
    "unknown task, mapped choices not a list": (None, ("--dataset", "lsat", "--map",
                                                        "problem=question,gold_answer=target,choices=answer"),
                                                [":1: field 'doc.answer': expected the options as a list of text"]),
    "a mapped output": (None, ("--map", "reasoning=resps"), ["--map reasoning: an lm-eval sample's output is its resps"]),
    "--requests": (None, ("--requests", "x.jsonl"), ["read as lm-eval", "which takes no --requests"]),
}


def _renamed_task(f: Path) -> Path:
    """The run as if its task were `arith` (a task no dataset's patterns know)."""
    new = f.with_name(f.name.replace("gsm8k_local", "arith"))
    f.rename(new)
    _damage_results(lambda d: d["configs"].__setitem__("arith", d["configs"].pop("gsm8k_local")))(new)
    return new


@pytest.mark.slow
@pytest.mark.parametrize("case", list(BAD))
def test_bad_input_is_one_line_naming_file_line_and_field(
        case: str, lm_eval_run: dict[str, Path], tmp_path: Path) -> None:
    damage, args, expect = BAD[case]
    f = copy_run(lm_eval_run["gsm8k_local"], tmp_path / "run", "x.jsonl" if case == "renamed" else None)
    if case.startswith("unknown task"):
        f = _renamed_task(f)
    if damage is not None:
        damage(f)
    db = tmp_path / "s.duckdb"
    line = legival("ingest", f, "--db", db, *args, cwd=tmp_path).error(*expect)
    assert str(f) in line and "(nothing from this file was stored)" in line
    assert not db.exists()


@pytest.mark.slow
def test_skip_bad_skips_and_lists_the_bad_sample(lm_eval_run: dict[str, Path], tmp_path: Path) -> None:
    f = copy_run(lm_eval_run["gsm8k_local"], tmp_path / "run")
    _damage_line(2, lambda s: s.update(resps=7))(f)
    r = legival("ingest", f, "--db", tmp_path / "s.duckdb", "--skip-bad")
    assert r.returncode == 0, r.stderr
    assert r.summary()["new_traces"] == 2 and r.summary()["bad_lines"] == 1
    assert f"skipped: {f}:2: field 'resps'" in r.stderr and "doc_id 1" in r.stderr


@pytest.mark.slow
def test_an_unknown_task_reads_with_dataset_and_map(lm_eval_run: dict[str, Path], tmp_path: Path) -> None:
    """`--dataset` alone where the dataset's layout fits the doc; `--map` names the doc's fields (or the
    sample's `target`) for a dataset with no layout."""
    f = _renamed_task(copy_run(lm_eval_run["gsm8k_local"], tmp_path / "run"))
    a = legival("ingest", f, "--db", tmp_path / "a.duckdb", "--dataset", "gsm8k")
    b = legival("ingest", f, "--db", tmp_path / "b.duckdb", "--dataset", "lsat", "--map",
                "problem=question,gold_answer=target,problem_id=question")
    assert a.returncode == b.returncode == 0, a.stderr + b.stderr
    want = expected(lm_eval_run["gsm8k_local"])
    with Store(tmp_path / "a.duckdb", read_only=True) as s:
        got = rows(s, "SELECT problem_id, gold FROM problems ORDER BY 1")
    assert got == [(f"arith-{i}", want[f"gsm8k_local-{i}"][3]) for i in range(3)]
    with Store(tmp_path / "b.duckdb", read_only=True) as s:
        got = rows(s, "SELECT dataset, problem_id, question, gold FROM problems ORDER BY 2")
    assert sorted(got) == sorted(("lsat", w[2], w[2], w[3]) for w in want.values())


@pytest.mark.slow
def test_a_compressed_copy_reads_the_same(lm_eval_run: dict[str, Path], tmp_path: Path) -> None:
    """gzip-compressed, its results JSON named as lm-eval names it for `--output_path my-eval.json`."""
    f = copy_run(lm_eval_run["gsm8k_local"], tmp_path / "run")
    want = expected(f)
    (res,) = f.parent.glob("results_*.json")
    res.rename(res.with_name(res.name.replace("results_", "my-eval_")))
    gz = f.with_name(f.name + ".gz")
    gz.write_bytes(gzip.compress(f.read_bytes()))
    f.unlink()
    r = legival("ingest", gz, "--db", tmp_path / "s.duckdb")
    assert r.returncode == 0 and r.summary()["files"][0]["format"] == "lm-eval", r.stderr
    assert stored(tmp_path / "s.duckdb") == want


def test_sniff_tells_lm_eval_samples_from_the_other_files(tmp_path: Path) -> None:
    """By name (samples_<task>_<date>.jsonl) or by the first bytes lm-eval writes; never our own files."""
    from legival_core.readers.sources import choose, source_info

    ours = tmp_path / "traces.jsonl"
    ours.write_text((EXAMPLES / "gsm8k_md_eval_cot_5teachers.jsonl").read_text().splitlines()[0] + "\n")
    assert choose(ours) == "legival"
    named = tmp_path / "samples_gsm8k_2026-12-05T07-48-31.105210.jsonl.zst"
    named.write_bytes(b"")
    assert choose(named) == "lm-eval"
    headed = tmp_path / "renamed.jsonl"
    headed.write_text('{"doc_id": 0, "doc": {}}\n')
    assert choose(headed) == "lm-eval"
    import pyarrow as pa
    import pyarrow.parquet as pq

    table = tmp_path / "traces.parquet"
    pq.write_table(pa.Table.from_pylist([json.loads(ours.read_text())]), table)
    assert not source_info("lm-eval").sniff(table) and not source_info("lm-eval").sniff(tmp_path)


def test_missing_library_is_one_line_with_the_install_command(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Without lm_eval installed (hidden from the import system here), the error says what to install."""
    f = tmp_path / "samples_gsm8k_2026-12-05T07-48-31.105210.jsonl"
    f.write_bytes(b"")  # never read: the library is checked first
    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec",
                        lambda name, *a: None if name.split(".")[0] == "lm_eval" else real(name, *a))
    line = legival("ingest", f, "--db", tmp_path / "s.duckdb").error(
        "reading lm-eval files needs the lm_eval library", "pip install 'legival[lm-eval]'",
        ".venv/bin/pip install -e '.[lm-eval]'")
    assert str(f) in line and not (tmp_path / "s.duckdb").exists()


@pytest.mark.slow
def test_fuzzed_samples_give_records_or_errors_never_a_crash(lm_eval_run: dict[str, Path], tmp_path: Path) -> None:
    """Every top-level and doc field of a real sample removed or given another type: the reader and the
    record parser answer with records or IngestErrors naming line 1, nothing else."""
    from legival_core.readers.sources import read_source
    from legival_core.readers.trace_records import IngestError, parse_record

    src = lm_eval_run["gsm8k_local"]
    first = samples(src)[0]
    drop = object()
    values: list[Any] = [drop, None, 7, -1, 2.5, True, "x", "", [], [[]], {}, [["a", 3]], {"k": "v"}]
    cases = [(k, v) for k in first for v in values] + [(f"doc.{k}", v) for k in first["doc"] for v in values]
    f = copy_run(src, tmp_path / "run")
    rest = src.read_text(encoding="utf-8").splitlines(True)[1:]
    failed: set[str] = set()
    for key, value in cases:
        s = json.loads(json.dumps(first))
        holder, name = (s["doc"], key[4:]) if key.startswith("doc.") else (s, key)
        if value is drop:
            del holder[name]
        else:
            holder[name] = value
        f.write_text(json.dumps(s) + "\n" + "".join(rest), encoding="utf-8")
        for line, rec in read_source(f, "lm-eval")[2]:
            try:
                if isinstance(rec, IngestError):
                    raise rec
                parse_record(rec, str(f), line, None, "line")
            except IngestError as e:
                assert e.line == 1 and e.file == str(f), (key, value, e)
                if value is drop:
                    failed.add(key)
    assert {"doc_id", "doc", "resps", "filter", "doc.question", "doc.answer"} <= failed  # what a trace needs


@pytest.mark.slow
def test_a_repeated_task_gives_one_trace_per_generation(lm_eval_run: dict[str, Path], tmp_path: Path) -> None:
    """`repeats: 2`: both generations of a doc are traces of its problem; lm-eval's verdict is of the vote
    (its filter), not of either generation, so no source verdict is stored."""
    f = lm_eval_run[REPEATED]
    r = legival("ingest", f, "--db", tmp_path / "s.duckdb")
    assert r.returncode == 0, r.stderr
    want = sorted((f"{REPEATED}-{s['doc_id']}", split_thinking(text).reasoning)
                  for s in samples(f) for text in s["resps"][0])
    assert len(want) == 6 and len({w[1] for w in want}) > 3  # sampled: the generations differ
    with Store(tmp_path / "s.duckdb", read_only=True) as s:
        got = rows(s, "SELECT problem_id, reasoning, source_correct, provenance FROM traces")
    assert sorted(g[:2] for g in got) == want and r.summary()["new_traces"] == len(set(want))
    assert {g[2] for g in got} == {None}
    assert sorted(json.loads(g[3])["lm_eval_repeat"] for g in got) == sorted([0, 1] * 3)


@pytest.mark.slow
def test_one_doc_given_twice_with_other_output_is_a_conflict_naming_both_lines(
        lm_eval_run: dict[str, Path], tmp_path: Path) -> None:
    """Issue 45 item 6: a doc (doc_id, and repeat) of the first filter written twice with different
    generations is an error naming both lines; the same line twice is a counted duplicate."""
    f = copy_run(lm_eval_run["gsm8k_local"], tmp_path / "run")
    lines = samples(f)
    first = lines[0]["filter"]
    at = next(i for i, s in enumerate(lines, start=1) if s["filter"] == first and s["doc_id"] == 1)
    other = next(s for s in lines if s["filter"] == first and s["doc_id"] == 2)
    original = f.read_text(encoding="utf-8")
    f.write_text(original + json.dumps({**lines[at - 1], "resps": other["resps"]}) + "\n", encoding="utf-8")
    db = tmp_path / "s.duckdb"
    legival("ingest", f, "--db", db).error(
        f"{f}:{len(lines) + 1}: field 'lm_eval_doc_id': lm_eval_doc_id 1 is also at line {at} of this file, with "
        "another trace")
    assert not db.exists()
    f.write_text(original + json.dumps(lines[at - 1]) + "\n", encoding="utf-8")
    r = legival("ingest", f, "--db", db)
    assert (r.returncode, r.summary()["new_traces"], r.summary()["duplicate_records"]) == (0, 3, 1), r.stderr
