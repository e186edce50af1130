"""`--retry-failed` on every command that stores failures (issue 38 item 5), as a user runs it.

One rule for every stage (docs/CLI.md "Failure contract"): a unit that failed for a reason of its own
(a bug on its input, a request the endpoint rejects) is stored as failed and skipped by the next run;
`--retry-failed` (or `LEGIVAL_RETRY_FAILED=1`) computes it again; once the cause is fixed it is computed
and its failure forgotten. A failure that a later call could turn out otherwise (an endpoint that cannot
be reached, rate limits, a refused key) is never stored: those units stay to do
(tests/core/judges/test_judge_unreachable.py, tests/core/stages/test_isolation.py).

Each command runs in a process of its own with the poisoned plugins (tests/plugins/poisoned.py, the
scripted backend's `poison` option, a local chat-completions server that rejects the poisoned trace).
"""

from __future__ import annotations

import json
import os
import shutil
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from legival_core.store import Store
from tests._cli import Ran, entry_point
from tests._sql import rows
from tests.conftest import EXAMPLES, REPO
from tests.fakes import Canned
from tests.fakes.openai_server import FakeOpenAI, lexical_responder

MARKER = "POISONED-MARKER-QX"
SAMPLE = EXAMPLES / "gsm8k_md_eval_cot_5teachers.jsonl"


@pytest.fixture(scope="module")
def template(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A store of 4 real traces and a poisoned copy of a correct one (gpt-oss-20b's), its first sentence
    holding the marker (so every prefix but the empty one, and every judge prompt, holds it)."""
    folder = tmp_path_factory.mktemp("retry")
    recs = [json.loads(x) for x in SAMPLE.read_text().splitlines()[:4]]
    poisoned = dict(recs[3], model="poisoned-teacher", reasoning=f"{MARKER} is here. {recs[3]['reasoning']}")
    f = folder / "t.jsonl"
    f.write_text("".join(json.dumps(r) + "\n" for r in [*recs, poisoned]), encoding="utf-8")
    db = folder / "template.duckdb"
    assert entry_point("ingest", f, "--db", db, timeout=300).returncode == 0
    return db


@pytest.fixture
def db(template: Path, tmp_path: Path) -> Path:
    dst = tmp_path / "s.duckdb"
    shutil.copy(template, dst)
    return dst


class Judge:
    """A local chat-completions judge that rejects (400) any request holding the marker while `poison`."""

    def __init__(self) -> None:
        self.poison = True
        self.server = FakeOpenAI(self.respond)

    def respond(self, body: Any) -> Canned:
        if self.poison and MARKER in json.dumps(body):
            return Canned.error(400, message="this request is malformed")
        return lexical_responder(body)


@pytest.fixture
def judge() -> Iterator[Judge]:
    j = Judge()
    with j.server:
        yield j


def _env(poison: str, **extra: str) -> dict[str, str]:
    return {**os.environ, "LEGIVAL_PLUGINS": "tests.plugins.scripted,tests.plugins.poisoned",
            "LEGIVAL_TEST_POISON": poison, "PYTHONPATH": str(REPO), **extra}


Command = Callable[[Path, "Judge", bool], tuple[str, ...]]
"""(db, judge, poisoned) -> the command's arguments."""

COMMANDS: dict[str, tuple[str, Command]] = {
    "efficiency": ("efficiency", lambda db, _j, _p: ("efficiency", "--db", str(db))),
    "quality": ("quality", lambda db, _j, _p: ("quality", "--db", str(db), "--metrics", "poisoned_quality")),
    "transfer": ("transfer", lambda db, _j, p: (
        "transfer", "--db", str(db), "--student", "scripted", "--backend", "scripted-demo", "--model", "scripted-demo-v1",
        "--max-new-tokens", "8", "--step-interval", "4",
        "--backend-options", json.dumps({"poison": MARKER} if p else {}))),
    "judge": ("judge", lambda db, j, _p: ("judge", "--db", str(db), "--judge", "openai-compatible", "--model", "m",
                                          "--base-url", j.server.url + "/v1", "--concurrency", "1")),
}


def _failed(db: Path, stage: str) -> int:
    with Store(db, read_only=True) as s:
        if stage == "judge":
            return len(rows(s, "SELECT trace_id FROM judge_results WHERE status = 'failed'"))
        return len(rows(s, "SELECT unit_key FROM unit_failures WHERE stage LIKE ?", [f"{stage}%"]))


def _tried_the_failed_again(r: Ran, stage: str) -> bool:
    """The run attempted the stored failure (it failed again: the poison is still there)."""
    s = r.summary()
    if stage == "judge":
        return bool(s["judge_calls"] == 1 and s["failed"] == 1)
    entry = _entry(s, stage)
    return bool(entry.get("failed") == 1 and not entry.get("skipped_failed_before"))


def _entry(summary: dict[str, Any], stage: str) -> dict[str, Any]:
    """The summary's `failed_by_stage` entry of `stage` (a quality group's is `quality:<group>`)."""
    by_stage = summary.get("failed_by_stage", {})
    return next((v for k, v in by_stage.items() if k == stage or k.startswith(stage + ":")), {})


@pytest.mark.parametrize("name", list(COMMANDS))
def test_retry_failed_on_every_command_that_stores_failures(db: Path, judge: Judge, name: str) -> None:
    stage, args = COMMANDS[name]
    if name == "judge":  # the judge reads steps: segmented first, with no poison
        assert entry_point("efficiency", "--db", db, env=_env(""), cwd=REPO, timeout=300).returncode == 0

    def run(*extra: str, poison: bool = True, **env: str) -> Ran:
        r = entry_point(*args(db, judge, poison), *extra, env=_env(MARKER if poison else "", **env), cwd=REPO,
                        timeout=600)
        assert r.returncode in (0, 1, 2), r.stderr[-3000:]  # every unit it tried failed: 1 (judge: 2)
        assert "Traceback" not in r.stderr, r.stderr[-3000:]
        return r

    first = run()
    assert _failed(db, stage) == 1, first.stderr[-3000:]
    again = run()  # the stored failure is skipped
    if name == "judge":
        assert again.summary()["judge_calls"] == 0 and again.summary()["cached"] == again.summary()["selected"]
    else:
        assert _entry(again.summary(), stage)["skipped_failed_before"] == 1, again.stdout[-2000:]
    assert _tried_the_failed_again(run("--retry-failed"), stage)
    assert _tried_the_failed_again(run(LEGIVAL_RETRY_FAILED="1"), stage)
    judge.poison = False
    fixed = run("--retry-failed", poison=False)
    assert fixed.returncode == 0 and _failed(db, stage) == 0, fixed.stderr[-3000:]
    assert "failed:" not in fixed.stderr
