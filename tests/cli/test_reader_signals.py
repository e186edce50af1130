"""A signal while `legival ingest` reads ends it as every command ends (issue 45 item 2, legival/lifecycle/signals.py):
exit 128 + the signal, one `error: interrupted (SIGNAL): ...` line and nothing else on standard error (no
traceback, no asyncio "Exception in callback"), within seconds, its pipes closed and nothing of it left
running, the store as it was.

Each command runs as a user runs it (its own session, output through pipes: tests/flows/_lifecycle.py)
and is held inside its reader by tests/plugins/held_reading.py, without a clock: Inspect inside its event
loop (its async sample reader, the batch's other reads in flight on anyio's threads), `datasets` in
pyarrow's JSON reader, Legi-Val's own JSONL, OpenAI batch and lm-eval readers in the line reader they
share, with the file open. SIGTERM, SIGINT and SIGHUP each reach one command of each reader (the three
run at once). The places a library can hold a signal come from the plugin's `held` source: a plain
asyncio callback (the issue's hang: asyncio logged the exception and waited forever), a worker thread's
wait (the executor joins its stuck worker on the way out), a C call that does not return on a signal,
code that swallows every exception: the last three end by the deadline (`EXIT_DEADLINE_S`).
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import signal
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import pytest

from legival.lifecycle.signals import EXIT_DEADLINE_S, interrupted_line
from legival_core.store import Store
from tests._cli import legival
from tests._sql import rows
from tests.conftest import EXAMPLES, FIXTURES, REPO
from tests.flows._lifecycle import Watched, assert_ended_cleanly, send, start, wait_for

GSM8K = FIXTURES / "datasets" / "gsm8k" / "test.jsonl"
TRACES = EXAMPLES / "gsm8k_gpt-oss-120b_200.jsonl"
SIGNALS = (signal.SIGTERM, signal.SIGINT, signal.SIGHUP)
CONTRACT_S = 15.0
"""docs/CLI.md: every command ends within 15 s of the signal."""
DATE = "2026-01-02T03-04-05.678901"

MAKE_LOG = r'''
import json, sys
from pathlib import Path
from inspect_ai import Task, eval as inspect_eval
from inspect_ai.dataset import MemoryDataset, Sample
from inspect_ai.model import ChatMessageAssistant, ModelOutput, ModelUsage, get_model
from inspect_ai.scorer import match
from inspect_ai.solver import generate

out, gsm8k = Path(sys.argv[1]), Path(sys.argv[2])
problems = [json.loads(line) for line in gsm8k.read_text().splitlines()]
golds = {p["question"]: p["answer"].rsplit("####", 1)[1].strip() for p in problems}

def answer(messages, tools, tool_choice, config):
    gold = golds[[m.text for m in messages if m.role == "user"][-1]]
    msg = ChatMessageAssistant(content=f"<think>So it is {gold}.</think>The answer is {gold}", model="mockllm/model",
                               source="generate")
    return ModelOutput(model="mockllm/model", choices=[{"message": msg, "stop_reason": "stop"}],
                       usage=ModelUsage(input_tokens=10, output_tokens=10, total_tokens=20))

task = Task(name="gsm8k", dataset=MemoryDataset([Sample(id=i, input=p["question"], target=golds[p["question"]])
                                                 for i, p in enumerate(problems, start=1)]),
            solver=generate(), scorer=match(numeric=True))
log = inspect_eval(task, model=get_model("mockllm/model", custom_outputs=answer), log_dir=str(out / "logs"),
                   log_format="eval", display="none", log_realtime=False)[0]
Path(log.location).rename(out / "gsm8k.eval")
'''


@dataclass(frozen=True)
class Reader:
    fmt: str
    file: str
    hold: str
    """Where tests/plugins/held_reading.py holds it (`call:MODULE:NAME`)."""
    args: tuple[str, ...] = ()


LINES = "call:legival_core.readers.input_files:InputFile.lines"
READERS = {
    "inspect": Reader("inspect", "gsm8k.eval", "call:inspect_ai.log:read_eval_log_sample_async"),
    "lm-eval": Reader("lm-eval", f"samples_gsm8k_{DATE}.jsonl", LINES),
    "hf": Reader("hf", "hf.jsonl", "call:pyarrow.json:read_json"),
    "openai": Reader("openai", "batch.jsonl", LINES, ("--dataset", "gsm8k", "--problems", str(GSM8K))),
    "jsonl": Reader("legival", "traces.jsonl", LINES),
}


@pytest.fixture(scope="module")
def inputs(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A store holding a few traces (`template.duckdb`) and one input per reader, of other traces."""
    folder = tmp_path_factory.mktemp("reader-signals")
    lines = TRACES.read_text(encoding="utf-8").splitlines()
    (folder / "first.jsonl").write_text("\n".join(lines[:3]) + "\n", encoding="utf-8")
    ran = legival("ingest", folder / "first.jsonl", "--db", folder / "template.duckdb")
    assert ran.returncode == 0, ran.stderr
    for name in ("traces.jsonl", "hf.jsonl"):
        (folder / name).write_text("\n".join(lines[10:20]) + "\n", encoding="utf-8")
    problems = [json.loads(line) for line in GSM8K.read_text(encoding="utf-8").splitlines()]
    batch, samples = [], []
    for i, p in enumerate(problems):
        gold = p["answer"].rsplit("####", 1)[1].strip()
        message = {"role": "assistant", "content": f"The answer is {gold}.", "reasoning_content": f"So {gold}."}
        batch.append({"object": "chat.completion", "id": f"c{i}", "model": "teacher", "messages": [
            {"role": "user", "content": p["question"]}], "choices": [
            {"index": 0, "message": message, "finish_reason": "stop"}]})
        samples.append({"doc_id": i, "doc": p, "target": p["answer"], "resps": [[f"<think>So {gold}.</think> {gold}"]],
                        "filtered_resps": [gold], "filter": "strict-match", "exact_match": 1.0})
    (folder / "batch.jsonl").write_text("".join(json.dumps(b) + "\n" for b in batch), encoding="utf-8")
    (folder / f"samples_gsm8k_{DATE}.jsonl").write_text("".join(json.dumps(s) + "\n" for s in samples), encoding="utf-8")
    (folder / f"results_{DATE}.json").write_text(json.dumps({"model_name": "teacher", "configs": {"gsm8k": {
        "task": "gsm8k", "output_type": "generate_until", "dataset_path": "gsm8k", "test_split": "test"}}}))
    done = subprocess.run([sys.executable, "-c", MAKE_LOG, str(folder), str(GSM8K)], capture_output=True, text=True,
                          env=_env(folder), timeout=300, check=False)
    assert done.returncode == 0, done.stderr[-3000:]
    return folder


def _env(folder: Path, **extra: str) -> dict[str, str]:
    plugins = ",".join(p for p in [os.environ.get("LEGIVAL_PLUGINS", ""), "tests.plugins.held_reading"] if p)
    return {**os.environ, "LEGIVAL_PLUGINS": plugins, "PYTHONPATH": str(REPO), "XDG_DATA_HOME": str(folder / "xdg"),
            "XDG_CACHE_HOME": str(folder / "xdg-cache"), "INSPECT_LOG_LEVEL": "warning", **extra}


def _digest(db: Path) -> str:
    """Every row of every table of the store, as a hash."""
    h = hashlib.sha256()
    with Store(db, read_only=True) as store:
        for (table,) in rows(store, "SELECT table_name FROM information_schema.tables ORDER BY 1"):
            h.update(f"{table}\n".encode())
            for r in sorted(repr(x) for x in rows(store, f'SELECT * FROM "{table}"')):
                h.update(r.encode())
    return h.hexdigest()


def _signalled(inputs: Path, tmp_path: Path, hold: str, fmt: str, file: Path, args: tuple[str, ...] = (),
               by_deadline: bool = False) -> None:
    """One command per signal, at once, each held where `hold` says then signalled: each ends cleanly
    (module docstring), before the deadline unless `by_deadline`, and its store is as it was."""
    before = _digest(inputs / "template.duckdb")
    runs: list[tuple[signal.Signals, Path, Watched, Path]] = []
    for sig in SIGNALS:
        db, mark = tmp_path / f"{sig.name}.duckdb", tmp_path / f"{sig.name}.held"
        shutil.copy(inputs / "template.duckdb", db)
        env = _env(inputs, LEGIVAL_TEST_READ_HOLD=hold, LEGIVAL_TEST_READ_MARK=str(mark))
        runs.append((sig, db, start(["ingest", str(file), "--db", str(db), "--from", fmt, *args], env), mark))
    try:
        sent = {}
        for sig, _db, w, mark in runs:
            wait_for(mark.exists, w, 120, f"the reader held ({hold})")
            sent[sig] = send(w, sig)
        for sig, db, w, _mark in runs:
            w.wait(CONTRACT_S + 5)
            took = time.monotonic() - sent[sig]
            bound = CONTRACT_S if by_deadline else EXIT_DEADLINE_S
            assert took < bound, (sig.name, took, w.stderr[-3000:])
            assert_ended_cleanly(w, 128 + sig)
            assert w.stderr.splitlines() == [interrupted_line(sig)], (sig.name, w.stderr[-3000:])
            assert _digest(db) == before, sig.name
    finally:  # a failure above leaves the other commands running: this test's own, each ended (not its group)
        for _sig, _db, w, _mark in runs:
            if w.proc.poll() is None:
                w.proc.kill()
                w.proc.wait()


@pytest.mark.parametrize("name", list(READERS))
def test_a_signal_while_a_reader_reads_ends_the_command_cleanly(name: str, inputs: Path, tmp_path: Path) -> None:
    reader = READERS[name]
    if name == "inspect":
        pytest.importorskip("inspect_ai", reason="pip install -e '.[inspect]'")
    _signalled(inputs, tmp_path, reader.hold, reader.fmt, inputs / reader.file, reader.args)


@pytest.mark.parametrize("place", ["asyncio-callback", "thread", "native", "swallow"])
def test_wherever_a_library_holds_the_signal_the_command_ends(place: str, inputs: Path, tmp_path: Path) -> None:
    """asyncio-callback: the exception reaches the boundary (asyncio re-raises a KeyboardInterrupt);
    the others: the deadline's watchdog ends the command (a thread's join, a C call, a swallow)."""
    if place == "native" and not sys.platform.startswith("linux"):
        pytest.skip("relocking a default pthread mutex waits for good on glibc")
    _signalled(inputs, tmp_path, place, "held", inputs / "traces.jsonl", by_deadline=place != "asyncio-callback")
