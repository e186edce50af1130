"""`legival ingest --from inspect`: Inspect AI eval logs (legival_core/readers/sources/inspect_log.py).

Every log here is written by Inspect itself: real GSM8K problems (tests/fixtures/datasets/gsm8k) run as
Inspect tasks against Inspect's offline `mockllm/model` provider, whose outputs carry reasoning content
blocks, `<think>` text, no reasoning at all, a cut-off generation, a chat input; other logs hold two
epochs, bad samples (no assistant message, a failed generation, redacted reasoning, two targets, no user
message), a task no dataset maps to, and a run stopped by an error. The damaged inputs are copies of those
real logs, cut short or edited. The logs are made once for the module, in a child process (Inspect
configures logging and its data directories process-wide).
"""

from __future__ import annotations

import importlib.util
import json
import os
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from legival_core.store import Store
from tests._cli import legival
from tests._sql import rows
from tests._zips import padded, write_zip
from tests.conftest import REPO

GSM8K = REPO / "tests" / "fixtures" / "datasets" / "gsm8k" / "test.jsonl"
INSTALL = "pip install -e '.[inspect]'"
BLOCKS = ("Janet has 16 - 3 - 4 = 9 eggs left to sell.", "She makes 9 * 2 = 18 dollars a day.")

# What the mock model answers, by sample id (the 5 problems' golds: 18, 3, 70000, 540, 20). Sample 4's
# answer ends with another number: Inspect's `match` scorer takes the last one (I), our grader the box.
MIXED: dict[int, dict[str, Any]] = {
    1: {"blocks": BLOCKS, "text": "The answer is 18"},
    2: {"text": "<think>Blue is 2 bolts, white is half: 1. Total 2 + 1 = 3.</think>The answer is 3"},
    3: {"text": "The profit is 200000 - 130000 = 70000 dollars, so the answer is 70000."},
    4: {"blocks": ("3 sprints * 3 times * 60 meters = 540 meters.",), "text": "\\boxed{540} (not 20)"},
    5: {"blocks": ("Each chicken eats 3 cups, 20 chickens eat 60 cups; she gave 15 + 25 = 40,",), "text": "",
        "stop": "max_tokens", "chat": True},
}
# Sample id -> the outputs of its first and second generation (the two epochs run in either order).
EPOCHS: dict[int, tuple[dict[str, Any], ...]] = {
    1: ({"blocks": ("16 - 3 - 4 = 9; 9 * 2 = 18.",), "text": "18"}, {"text": "<think>9 eggs at $2.</think>18"}),
    2: ({"text": "<think>2 + 1 = 3</think>\\boxed{3}"}, {"blocks": ("Half of 2 is 1.", "2 + 1 = 3."), "text": "3"}),
}

MAKE_LOGS = r'''
import json, sys
from pathlib import Path
from inspect_ai import Task, eval as inspect_eval
from inspect_ai.dataset import MemoryDataset, Sample
from inspect_ai.model import (ChatMessageAssistant, ChatMessageSystem, ChatMessageUser, ContentReasoning,
                              ContentText, ModelOutput, ModelUsage, get_model)
from inspect_ai.scorer import match
from inspect_ai.solver import generate, solver

out, gsm8k, spec = Path(sys.argv[1]), Path(sys.argv[2]), json.loads(sys.argv[3])
problems = [json.loads(line) for line in gsm8k.read_text().splitlines()]

def sample(i, chat=False):
    p = problems[i - 1]
    q = p["question"]
    inp = [ChatMessageSystem(content="Solve the problem."), ChatMessageUser(content=q)] if chat else q
    return Sample(id=i, input=inp, target=p["answer"].rsplit("####", 1)[1].strip())

def output(o):
    content = [ContentReasoning(reasoning=b, redacted=o.get("redacted", False)) for b in o.get("blocks", [])]
    content += [ContentText(text=o["text"])]
    msg = ChatMessageAssistant(content=content if o.get("blocks") else o["text"], model="mockllm/model",
                               source="generate")
    # usage given: mockllm would count tokens with tiktoken's o200k_base, not shipped offline
    return ModelOutput(model="mockllm/model", choices=[{"message": msg, "stop_reason": o.get("stop", "stop")}],
                       usage=ModelUsage(input_tokens=10, output_tokens=10, total_tokens=20))

def model(by_id, fail=()):
    questions = {problems[int(i) - 1]["question"]: o for i, o in by_id.items()}
    calls = {}
    def answer(messages, tools, tool_choice, config):
        q = ([m.text for m in messages if m.role == "user"] or [problems[0]["question"]])[-1]
        if q in fail:
            raise RuntimeError("the mock provider failed on purpose")
        n = calls[q] = calls.get(q, -1) + 1
        o = questions[q]
        return output(o[n] if isinstance(o, list) else o)
    return get_model("mockllm/model", custom_outputs=answer)

@solver
def skip_generate(ids):
    async def solve(state, generate_):
        return state if state.sample_id in ids else await generate_(state)
    return solve

def run(name, task, fmt, llm, **kw):
    log = inspect_eval(task, model=llm, log_dir=str(out / name), log_format=fmt, display="none",
                       log_realtime=False, **kw)[0]
    Path(log.location).rename(out / f"{name}.{fmt}")

mixed = {int(k): v for k, v in spec["mixed"].items()}
def mixed_task(name="gsm8k"):
    return Task(name=name, dataset=MemoryDataset([sample(i, mixed[i].get("chat", False)) for i in mixed]),
                solver=generate(), scorer=match(numeric=True))
for fmt in ("eval", "json"):
    run("mixed", mixed_task(), fmt, model(spec["mixed"]))
run("epochs", Task(name="gsm8k", dataset=MemoryDataset([sample(i) for i in (1, 2)]), solver=generate(),
                   scorer=match(numeric=True), epochs=2), "eval", model(spec["epochs"]))
redacted = {"blocks": ["gAAAAABo-encrypted-by-the-provider"], "redacted": True, "text": "The answer is 540"}
no_user = Sample(id=6, input=[ChatMessageSystem(content="Answer in one word.")], target="18")
two_targets = Sample(id=5, input=problems[4]["question"], target=["20", "twenty"])
bad = Task(name="gsm8k", dataset=MemoryDataset([sample(1), sample(2), sample(3), sample(4), two_targets, no_user]),
           solver=skip_generate({2}), scorer=match(numeric=True))
run("bad", bad, "eval", model({**spec["mixed"], "4": redacted}, fail={problems[2]["question"]}),
    fail_on_error=False)
run("unmapped", mixed_task("arithmetic_puzzles"), "eval", model(spec["mixed"]))
run("nosamples", mixed_task(), "eval", model(spec["mixed"]), log_samples=False)
stopped = Task(name="gsm8k", dataset=MemoryDataset([sample(i) for i in (1, 2, 3, 4, 5)]), solver=generate(),
               scorer=match(numeric=True))
for fmt in ("eval", "json"):
    run("stopped", stopped, fmt, model(spec["mixed"], fail={problems[2]["question"]}), max_samples=1)
'''


@pytest.fixture(scope="module")
def logs(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Inspect's own logs of the tasks above (and damaged copies), made once: `<name>.eval`/`.json`."""
    pytest.importorskip("inspect_ai", reason=INSTALL)
    out = tmp_path_factory.mktemp("inspect")
    home = tmp_path_factory.mktemp("inspect-home")
    spec = {"mixed": MIXED, "epochs": {k: list(v) for k, v in EPOCHS.items()}}
    env = {**os.environ, "XDG_DATA_HOME": str(home / "data"), "XDG_CACHE_HOME": str(home / "cache"),
           "INSPECT_LOG_LEVEL": "warning"}
    done = subprocess.run([sys.executable, "-c", MAKE_LOGS, str(out), str(GSM8K), json.dumps(spec)],
                          capture_output=True, text=True, env=env, timeout=300, check=False)
    assert done.returncode == 0, done.stderr[-3000:]
    data = (out / "mixed.eval").read_bytes()
    (out / "cut.eval").write_bytes(data[: len(data) // 2])
    text = (out / "mixed.json").read_text(encoding="utf-8")
    (out / "cut.json").write_text(text[: text.index('"id": 3,')], encoding="utf-8")
    return out


def _source(log: Path) -> list[Any]:
    """The log's samples as Inspect reads them (whole: these logs are small)."""
    from inspect_ai.log import read_eval_log

    samples = read_eval_log(str(log), resolve_attachments=True).samples
    assert samples
    return samples


def _expected(s: Any, epochs: int = 1) -> dict[str, Any]:
    """What a sample holds, as the issue maps it: written out here, not by the reader's code."""
    from inspect_ai.model import ChatMessageAssistant, ContentReasoning

    final = [m for m in s.messages if isinstance(m, ChatMessageAssistant)][-1]
    blocks = [c.reasoning for c in final.content if isinstance(c, ContentReasoning)] \
        if isinstance(final.content, list) else []
    text = s.output.completion
    if blocks:
        reasoning, answer = "\n\n".join(blocks), text
    else:
        think = re.fullmatch(r"<think>(.*)</think>(.*)", text, re.S)
        reasoning, answer = think.groups() if think else (text, "")
    question = s.input if isinstance(s.input, str) else [m for m in s.input if m.role == "user"][-1].text
    return {"teacher": "mockllm/model", "dataset": "gsm8k",
            "problem_id": f"{s.id}_epoch_{s.epoch}" if epochs > 1 else str(s.id),
            "question": question, "gold": s.target, "reasoning": reasoning, "answer_text": answer,
            "truncated": s.output.stop_reason == "max_tokens",
            "source_correct": {"C": True, "I": False}[s.scores["match"].value]}


FIELDS = ("teacher", "dataset", "problem_id", "question", "gold", "reasoning", "answer_text", "truncated",
          "source_correct")


def _stored(db: Path) -> dict[str, dict[str, Any]]:
    with Store(db, read_only=True) as s:
        got = rows(s, "SELECT t.teacher, t.dataset, t.problem_id, p.question, p.gold, t.reasoning, t.answer_text, "
                      "t.truncated, t.source_correct FROM traces t JOIN problems p USING (dataset, problem_id)")
    return {r[2]: dict(zip(FIELDS, r, strict=True)) for r in got}


def _ingest(log: Path, db: Path, *args: str) -> dict[str, Any]:
    r = legival("ingest", str(log), "--db", str(db), *args)
    assert r.returncode == 0, r.stderr[-3000:]
    assert "Traceback" not in r.stderr
    summary: dict[str, Any] = r.summary()
    return summary


@pytest.mark.parametrize("fmt", ["eval", "json"])
def test_each_sample_is_stored_as_the_log_holds_it(logs: Path, tmp_path: Path, fmt: str) -> None:
    db = tmp_path / "s.duckdb"
    r = legival("ingest", str(logs / f"mixed.{fmt}"), "--db", str(db))  # --from auto
    assert r.returncode == 0, r.stderr
    assert "read as inspect (--from auto)" in r.stderr
    (f,) = r.summary()["files"]
    assert (f["format"], f["lines"], f["new_traces"], f["bad_lines"]) == ("inspect", 5, 5, 0)
    assert f["label_disagreements"] == 1  # sample 4: the scorer read "20", we read the box
    assert "disagreement: line 4 (4): file says False, we say True" in r.stdout
    stored = _stored(db)
    source = _source(logs / f"mixed.{fmt}")
    assert sorted(stored) == ["1", "2", "3", "4", "5"]
    for s in source:
        assert stored[str(s.id)] == _expected(s), s.id
    # the mapping, spelled out on what the mock model said
    assert stored["1"]["reasoning"] == "\n\n".join(BLOCKS)
    assert stored["2"]["reasoning"].startswith("Blue is 2 bolts") and stored["2"]["answer_text"] == "The answer is 3"
    assert stored["3"]["reasoning"] == MIXED[3]["text"] and stored["3"]["answer_text"] == ""
    assert stored["5"]["truncated"] and stored["5"]["question"] == source[4].input[-1].text
    again = legival("ingest", str(logs / f"mixed.{fmt}"), "--db", str(db), "--from", "inspect")
    assert (again.summary()["new_traces"], again.summary()["already_stored"]) == (0, 5)


def test_eval_and_json_logs_of_one_run_store_the_same_traces(logs: Path, tmp_path: Path) -> None:
    _ingest(logs / "mixed.eval", tmp_path / "a.duckdb")
    _ingest(logs / "mixed.json", tmp_path / "b.duckdb")
    assert _stored(tmp_path / "a.duckdb") == _stored(tmp_path / "b.duckdb")


def test_two_epochs_are_two_traces_each(logs: Path, tmp_path: Path) -> None:
    db = tmp_path / "s.duckdb"
    s = _ingest(logs / "epochs.eval", db)
    assert (s["new_traces"], s["duplicate_records"]) == (4, 0)
    stored = _stored(db)
    assert sorted(stored) == ["1_epoch_1", "1_epoch_2", "2_epoch_1", "2_epoch_2"]
    for sample in _source(logs / "epochs.eval"):
        assert stored[f"{sample.id}_epoch_{sample.epoch}"] == _expected(sample, epochs=2)
    assert stored["1_epoch_1"]["reasoning"] != stored["1_epoch_2"]["reasoning"]


def test_teacher_and_dataset_can_be_named(logs: Path, tmp_path: Path) -> None:
    db = tmp_path / "s.duckdb"
    _ingest(logs / "mixed.eval", db, "--teacher", "my-model-v3", "--dataset", "gsm8k")
    assert {r["teacher"] for r in _stored(db).values()} == {"my-model-v3"}


def test_the_same_traces_from_our_jsonl_give_the_same_metric_rows(logs: Path, tmp_path: Path) -> None:
    own = tmp_path / "own.jsonl"
    with own.open("w", encoding="utf-8") as f:
        for s in _source(logs / "mixed.eval"):
            e = _expected(s)
            f.write(json.dumps({"teacher": e["teacher"], "dataset": e["dataset"], "problem_id": e["problem_id"],
                                "problem": e["question"], "gold_answer": e["gold"], "reasoning": e["reasoning"],
                                "response": e["answer_text"], "truncated": e["truncated"],
                                "correct": e["source_correct"]}) + "\n")
    metrics = []
    for name, src in (("inspect", logs / "mixed.eval"), ("own", own)):
        db = tmp_path / f"{name}.duckdb"
        _ingest(src, db)
        r = legival("efficiency", "--db", str(db))
        assert r.returncode == 0, r.stderr[-3000:]
        with Store(db, read_only=True) as st:
            metrics.append(rows(st, "SELECT trace_id, metric, params, code_version, value, method, status, detail "
                                    "FROM trace_metrics ORDER BY ALL"))
            metrics.append(rows(st, "SELECT trace_id, grader, extracted, correct, status FROM grades ORDER BY ALL"))
    assert metrics[0] and metrics[0] == metrics[2]
    assert metrics[1] and metrics[1] == metrics[3]


def test_bad_samples_name_the_sample_and_field(logs: Path, tmp_path: Path) -> None:
    db = tmp_path / "s.duckdb"
    r = legival("ingest", str(logs / "bad.eval"), "--db", str(db))
    line = r.error("bad.eval sample 2: field 'messages': sample id 2: no assistant message")
    assert "nothing from this file was stored" in line
    assert not db.exists() or not _stored(db)
    ok = legival("ingest", str(logs / "bad.eval"), "--db", str(db), "--skip-bad")
    assert ok.returncode == 0, ok.stderr
    skipped = [ln.split("bad.eval ", 1)[1] for ln in ok.stderr.splitlines() if ln.startswith("skipped: ")]
    assert skipped == [  # the bad samples, then the one the log says holds no trace (a failed generation)
        "sample 2: field 'messages': sample id 2: no assistant message (the model never answered)",
        "sample 4: field 'reasoning': sample id 4: 1 of 1 reasoning blocks are redacted (encrypted by the "
        "provider): no reasoning text to measure",
        "sample 5: field 'target': sample id 5 has 2 targets ['20', 'twenty']: Legi-Val grades against one gold "
        "answer",
        "sample 6: field 'input': sample id 6: no input text (a chat input without a user message?)",
        "sample 3: field 'error': sample id 3 failed in Inspect (RuntimeError('the mock provider failed on "
        "purpose')): no trace",
    ], ok.stderr
    assert (ok.summary()["bad_lines"], ok.summary()["skipped"]) == (4, 1)
    assert sorted(_stored(db)) == ["1"]


def test_a_damaged_sample_of_an_eval_log_is_that_samples_error(logs: Path, tmp_path: Path) -> None:
    """A copy of the real .eval log with 32 bytes of sample 2's compressed member overwritten."""
    import struct
    import zipfile

    data = bytearray((logs / "mixed.eval").read_bytes())
    member = zipfile.ZipFile(logs / "mixed.eval").getinfo("samples/2_epoch_1.json")
    name_len, extra_len = struct.unpack("<HH", data[member.header_offset + 26 : member.header_offset + 30])
    middle = member.header_offset + 30 + name_len + extra_len + member.compress_size // 2
    data[middle : middle + 32] = b"\xff" * 32
    damaged = tmp_path / "damaged.eval"
    damaged.write_bytes(bytes(data))
    db = tmp_path / "s.duckdb"
    legival("ingest", str(damaged), "--db", str(db)).error(
        "damaged.eval sample 2: field '<sample>': sample id 2: Inspect cannot read it (")
    assert _ingest(damaged, db, "--skip-bad")["new_traces"] == 4
    assert sorted(_stored(db)) == ["1", "3", "4", "5"]


def test_damaged_json_logs(logs: Path, tmp_path: Path) -> None:
    """Copies of the real .json log: a sample Inspect's model refuses is that sample's error; NaN (which
    Inspect writes, and ijson cannot stream) is read the way Inspect reads it."""
    text = (logs / "mixed.json").read_text(encoding="utf-8")
    at = text.index('"epoch": 1', text.index('"epoch": 1') + 1)  # the second sample's
    bad = tmp_path / "bad-epoch.json"
    bad.write_text(text[:at] + '"epoch": "one"' + text[at + len('"epoch": 1'):], encoding="utf-8")
    db = tmp_path / "s.duckdb"
    legival("ingest", str(bad), "--db", str(db)).error(
        "bad-epoch.json sample 2: field '<sample>': sample id 2: field 'epoch': Input should be a valid integer")
    assert _ingest(bad, db, "--skip-bad")["new_traces"] == 4
    nan = tmp_path / "nan.json"
    nan.write_text(text.replace('"value": "C"', '"value": NaN', 1), encoding="utf-8")
    assert _ingest(nan, tmp_path / "nan.duckdb")["new_traces"] == 5
    stored = _stored(tmp_path / "nan.duckdb")
    assert (stored["1"]["source_correct"], stored["2"]["source_correct"]) == (None, True)  # NaN: no verdict
    old = tmp_path / "future.json"
    old.write_text(text.replace('"version": 2', '"version": 99', 1), encoding="utf-8")
    legival("ingest", str(old), "--db", str(tmp_path / "f.duckdb")).error(
        "future.json: not a readable Inspect log (Unable to read version 99 of log format: a newer format than the "
        "installed Inspect reads (inspect_ai ")


@pytest.mark.parametrize("fmt", ["eval", "json"])
def test_samples_a_stopped_run_never_wrote_are_skipped_and_counted(logs: Path, tmp_path: Path, fmt: str) -> None:
    """The log says these hold no trace: counted skips with their reason, no --skip-bad needed."""
    db = tmp_path / "s.duckdb"
    r = legival("ingest", str(logs / f"stopped.{fmt}"), "--db", str(db))
    assert r.returncode == 0, r.stderr
    assert "sample 3: field 'error': sample id 3 failed in Inspect (RuntimeError(" in r.stderr
    assert f"skipped: {logs / f'stopped.{fmt}'} sample 5: field '<sample>': sample id 5: not in the log (the run " \
        "ended with status 'error': RuntimeError('the mock provider failed on purpose')): no trace" in r.stderr
    (f,) = r.summary()["files"]  # sample 4 was cancelled mid-run, or never started: skipped either way
    assert (f["new_traces"], f["skipped"], f["bad_lines"]) == (2, 3, 0)
    assert sorted(_stored(db)) == ["1", "2"]


@pytest.mark.parametrize(("log", "args", "expect"), [
    ("cut.eval", (), "cut.eval: not a readable Inspect log ("),
    ("cut.json", (), "cut.json: not a readable Inspect log: it ends after 2 sample(s) (cut short?)"),
    ("unmapped.eval", (), "task 'arithmetic_puzzles' maps to no registered dataset"),
    ("nosamples.eval", (), "nosamples.eval: the run logged no samples (log_samples=False, --no-log-samples)"),
    ("mixed.eval", ("--dataset", "nope"), "unknown dataset 'nope'"),
    ("mixed.eval", ("--map", "reasoning=x"), "which takes no --map"),
])
def test_unreadable_logs_are_one_error_line(logs: Path, tmp_path: Path, log: str, args: tuple[str, ...],
                                             expect: str) -> None:
    db = tmp_path / "s.duckdb"
    line = legival("ingest", str(logs / log), "--db", str(db), "--from", "inspect", *args).error(expect)
    assert "nothing from this file was stored" in line or "--map" in line
    assert not db.exists() or not _stored(db)


def test_a_task_with_no_mapping_is_ingested_with_dataset(logs: Path, tmp_path: Path) -> None:
    r = legival("ingest", str(logs / "unmapped.eval"), "--db", str(tmp_path / "s.duckdb"))
    r.error("give --dataset NAME")
    assert _ingest(logs / "unmapped.eval", tmp_path / "s.duckdb", "--dataset", "gsm8k")["new_traces"] == 5


def test_auto_leaves_other_files_alone(logs: Path, tmp_path: Path) -> None:
    """Sniffing reads a few bytes and never imports Inspect; our own JSONL, even named .json, is ours."""
    own = tmp_path / "traces.json"
    own.write_text(json.dumps({"teacher": "t", "dataset": "gsm8k", "problem_id": "1", "problem": "q",
                               "gold_answer": "1", "reasoning": "r", "response": "1"}) + "\n")
    code = ("import sys; from pathlib import Path; from legival_core.readers.sources.inspect_log import sniff; "
            "print([sniff(Path(p)) for p in sys.argv[1:]], 'inspect_ai' in sys.modules)")
    got = subprocess.run([sys.executable, "-c", code, str(logs / "mixed.eval"), str(logs / "mixed.json"), str(own),
                          str(logs)], capture_output=True, text=True, cwd=REPO, check=True)
    assert got.stdout.split() == ["[True,", "True,", "False,", "False]", "False"], got.stderr
    assert _ingest(own, tmp_path / "s.duckdb")["files"][0]["format"] == "legival"


def test_a_missing_inspect_is_one_line_with_the_install(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Runs without Inspect too: the library is looked for before the file is opened."""
    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec",
                        lambda name, *a: None if name == "inspect_ai" else real(name, *a))
    log = tmp_path / "run.eval"
    log.write_bytes(b"")
    r = legival("ingest", str(log), "--db", str(tmp_path / "s.duckdb"), "--from", "inspect")
    r.error("run.eval: reading inspect files needs the inspect_ai library, which is not installed: "
            "pip install 'legival[inspect]'")
    listed = legival("list", "formats")
    assert listed.returncode == 0 and "inspect" in listed.summary()["formats"]


# ------------------------------------------------------------------ issue 45: bombs, versions, duplicates

GIB = 1 << 30


def _raw_members(log: Path) -> list[tuple[str, int, bytes, int, int]]:
    """(name, method, compressed bytes, crc, size) of each member of a real .eval log, as Inspect wrote it."""
    import struct
    import zipfile

    data = log.read_bytes()
    out = []
    for i in zipfile.ZipFile(log).infolist():
        n, e = struct.unpack("<HH", data[i.header_offset + 26 : i.header_offset + 30])
        start = i.header_offset + 30 + n + e
        out.append((i.filename, i.compress_type, data[start : start + i.compress_size], i.CRC, i.file_size))
    return out


def _member_text(member: tuple[str, int, bytes, int, int]) -> bytes:
    import zlib

    import zstandard

    _name, method, raw, _crc, _size = member
    return zstandard.ZstdDecompressor().decompressobj().decompress(raw) if method == 93 else \
        zlib.decompress(raw, -15) if method == 8 else raw


def _bombed(log: Path, out: Path, member: str, spaces: int, method: int = 8, lie: bool = False) -> Path:
    """A copy of a real .eval log whose `member` holds `spaces` more spaces (valid JSON still), declaring
    its true size, or (`lie`) its original size and crc."""
    members = _raw_members(log)
    i = next(k for k, m in enumerate(members) if m[0] == member)
    raw, crc, size = padded(_member_text(members[i]), spaces, method)
    members[i] = (member, method, raw, *(members[i][3:] if lie else (crc, size)))
    return write_zip(out, members)


@pytest.mark.parametrize(("method", "lie"), [(8, False), (93, True), (8, True)],
                         ids=["declared-1GiB-deflate", "lying-size-zstd", "lying-size-deflate"])
def test_a_sample_member_that_inflates_to_1_gib_is_a_counted_skip_in_seconds(
        logs: Path, tmp_path: Path, method: int, lie: bool) -> None:
    """Issue 45 item 3: a ~1 MB .eval whose sample member inflates to 1 GiB (declared honestly, refused
    without inflating it; or declared small, counted while inflated and stopped at the limit): that sample
    is a counted skip with its reason, the log's other samples are read, in seconds."""
    bomb = _bombed(logs / "mixed.eval", tmp_path / "bomb.eval", "samples/2_epoch_1.json", GIB, method, lie)
    assert bomb.stat().st_size < 2_000_000
    db = tmp_path / "s.duckdb"
    r = legival("ingest", str(bomb), "--db", str(db))
    assert r.returncode == 0 and "Traceback" not in r.stderr, r.stderr[-3000:]
    original = next(m for m in _raw_members(logs / "mixed.eval") if m[0] == "samples/2_epoch_1.json")
    why = f"inflates to more than 67,108,864 bytes (though it declares {original[4]:,})" if lie else \
        f"declares {GIB + original[4]:,} bytes once inflated"
    (line,) = [ln for ln in r.stderr.splitlines() if ln.startswith("skipped: ")]
    assert line == (f"skipped: {bomb} sample 2: field '<sample>': sample id 2: its member samples/2_epoch_1.json "
                    f"{why}, over the limit of one record (ingest.max_record_bytes, --max-record-bytes) (67,108,864 "
                    "bytes); not read (a decompression bomb? the log's other samples are read)"), line
    s = r.summary()
    assert (s["new_traces"], s["skipped"], s["bad_lines"]) == (4, 1, 0)
    assert s["wall_s"] < 60, s["wall_s"]  # seconds, not minutes (about 1 s here)
    assert sorted(_stored(db)) == ["1", "3", "4", "5"]


def test_the_limit_is_an_option_and_a_sample_within_it_is_read(logs: Path, tmp_path: Path) -> None:
    """A sample padded with 300 KB of spaces is read as it is (the same trace as without them); with
    --max-record-bytes 200000 it is over the limit and skipped."""
    padded = _bombed(logs / "mixed.eval", tmp_path / "padded.eval", "samples/2_epoch_1.json", 300_000, 93, lie=True)
    _ingest(logs / "mixed.eval", tmp_path / "ref.duckdb")
    _ingest(padded, tmp_path / "a.duckdb")
    assert _stored(tmp_path / "a.duckdb") == _stored(tmp_path / "ref.duckdb")
    s = _ingest(padded, tmp_path / "b.duckdb", "--max-record-bytes", "200000")
    assert (s["new_traces"], s["skipped"]) == (4, 1)
    legival("ingest", str(padded), "--db", str(tmp_path / "c.duckdb"), "--max-record-bytes", "0").error(
        "--max-record-bytes: Input should be greater than or equal to 1")


@pytest.mark.parametrize(("log", "member", "lie"), [
    ("mixed.eval", "header.json", False),
    ("mixed.eval", "header.json", True),
    ("stopped.eval", "summaries.json", True),  # read for a run that did not succeed
])
def test_a_bomb_in_the_header_or_summaries_is_one_error_in_seconds(logs: Path, tmp_path: Path, log: str,
                                                                   member: str, lie: bool) -> None:
    bomb = _bombed(logs / log, tmp_path / log, member, GIB, 93 if lie else 8, lie)
    r = legival("ingest", str(bomb), "--db", str(tmp_path / "s.duckdb"))
    r.error(f"{bomb}: not a readable Inspect log: its member {member} ",
            "over the limit of one record (ingest.max_record_bytes, --max-record-bytes) (67,108,864 bytes): not read",
            "nothing from this file was stored")


@pytest.mark.parametrize("fmt", ["eval", "json"])
def test_a_log_of_an_unknown_version_is_refused_whatever_its_format(logs: Path, tmp_path: Path, fmt: str) -> None:
    """Issue 45 item 6: Inspect refuses version 99 of a .json log and read it from a .eval one; one check
    for both, with one message."""
    future = tmp_path / f"future.{fmt}"
    if fmt == "json":
        text = (logs / "mixed.json").read_text(encoding="utf-8")
        future.write_text(text.replace('"version": 2', '"version": 99', 1), encoding="utf-8")
    else:
        members = _raw_members(logs / "mixed.eval")
        i = next(k for k, m in enumerate(members) if m[0] == "header.json")
        header = json.loads(_member_text(members[i]))
        assert header["version"] == 2
        header["version"] = 99
        import zlib

        text = json.dumps(header).encode()
        members[i] = ("header.json", 0, text, zlib.crc32(text), len(text))
        write_zip(future, members)
    legival("ingest", str(future), "--db", str(tmp_path / "s.duckdb")).error(
        f"{future}: not a readable Inspect log (Unable to read version 99 of log format: a newer format than the "
        "installed Inspect reads (inspect_ai ", "upgrade it)")


def test_one_sample_twice_in_a_json_log_with_other_output_is_a_conflict(logs: Path, tmp_path: Path) -> None:
    """Issue 45 item 6: a .json log holding sample 2 (epoch 1) twice, the second time with sample 1's
    output, gives two traces for one sample: an error naming both; the same sample twice is a counted
    duplicate."""
    log = json.loads((logs / "mixed.json").read_text(encoding="utf-8"))
    two = next(s for s in log["samples"] if s["id"] == 2)
    one = next(s for s in log["samples"] if s["id"] == 1)
    twice = tmp_path / "twice.json"
    twice.write_text(json.dumps({**log, "samples": [*log["samples"], {**two, "messages": one["messages"],
                                                                       "output": one["output"]}]}), encoding="utf-8")
    db = tmp_path / "s.duckdb"
    legival("ingest", str(twice), "--db", str(db)).error(
        f"{twice} sample 6: field 'sample_id': sample_id 2, epoch 1 is also at sample 2 of this file, with another "
        "trace (reasoning, answer text differ)")
    assert not db.exists() or not _stored(db)
    same = tmp_path / "same.json"
    same.write_text(json.dumps({**log, "samples": [*log["samples"], two]}), encoding="utf-8")
    s = _ingest(same, db)
    assert (s["new_traces"], s["duplicate_records"]) == (5, 1)
