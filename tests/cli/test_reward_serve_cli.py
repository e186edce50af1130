"""`legival reward serve` as a user runs it (issue 47): it answers /health, /score and OpenRLHF's
/get_reward, logs every scored item to the store's journal (never holding the store: `legival reward
report` and `study list` run meanwhile), and SIGINT, SIGTERM or SIGHUP end it with exit 0 and nothing
left running (its local Ray, replicas and proxy included; the test lists what is left, never kills a
group). Refusals before Ray starts are one line."""

from __future__ import annotations

import json
import os
import signal
import socket
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests._cli import legival
from tests.flows._lifecycle import assert_ended_cleanly, below, send, start, wait_for

pytestmark = pytest.mark.slow
pytest.importorskip("ray.serve", reason="Ray Serve is not installed: make install (the `rl` extra)")

QUESTION = "Tom has 9 apples and buys 9 more. How many apples does he have?"
SPEC = {"name": "legibility", "dataset": "gsm8k", "components": {
    "correct": {"weight": 1.0}, "length": {"weight": 0.1, "target": 50},
    "transfer": {"weight": 0.5, "step_interval": 2, "max_new_tokens": 32,
                 "student": {"name": "scripted-demo", "backend": "scripted-demo", "model": "scripted-demo-v1"}}},
    "watch": {"student": {"name": "scripted-other", "backend": "scripted-demo", "model": "scripted-demo-v2"}}}


def _port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _post(url: str, body: Any, headers: dict[str, str] | None = None) -> tuple[int, Any]:
    req = urllib.request.Request(url, data=json.dumps(body).encode(), method="POST",
                                 headers={"content-type": "application/json", **(headers or {})})
    try:
        with urllib.request.urlopen(req, timeout=300) as r:
            return r.status, json.loads(r.read())
    except urllib.error.HTTPError as e:
        raw = e.read()
        try:
            return e.code, json.loads(raw or b"null")
        except ValueError:  # the guard's refusals are plain text
            return e.code, raw.decode("utf-8", "replace")


@pytest.fixture
def spec(tmp_path: Path) -> Path:
    path = tmp_path / "reward.yaml"
    path.write_text(yaml.safe_dump({**SPEC, "store": str(tmp_path / "r.duckdb")}))
    return path


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT, signal.SIGHUP])
def test_a_served_reward_scores_logs_and_ends_cleanly_on_each_signal(spec: Path, tmp_path: Path,
                                                                     sig: signal.Signals) -> None:
    port = _port()
    w = start(["reward", "serve", str(spec), "--port", str(port), "--cpus", "2"], {**os.environ})
    seen: list[int] = []
    try:
        wait_for(lambda: any(ln.startswith("http://") for ln in w.out), w, 240, "the server's URL")
        url = f"http://127.0.0.1:{port}"
        seen = below(w.pid)
        if sig is signal.SIGTERM:  # the whole contract once; the other signals only end it
            items = [{"prompt": QUESTION, "completion": f"9 + 9 = 18. So he has 18. The answer is \\boxed{{18}}. ({i})",
                      "gold": "18", "step": i} for i in range(3)]
            status, got = _post(url + "/score", {"items": items + [{"prompt": QUESTION, "completion": 7, "gold": "18"}]})
            assert status == 200 and [r["error"] for r in got["results"]][-1].startswith("items[3].completion")
            assert all(r["reward"] is not None and r["correct"] for r in got["results"][:3]), got
            prompt = f"<|im_start|>user\n{QUESTION}<|im_end|>\n<|im_start|>assistant\n"
            status, got = _post(url + "/get_reward", {"query": [prompt + "9 + 9 = 18. The answer is 18.<|im_end|>"],
                                                      "prompts": [prompt], "labels": ["18"]})
            assert status == 200 and len(got["rewards"]) == 1 and set(got["extra_logs"]) >= {"legival_correct"}
            assert _post(url + "/score", {"items": "x"})[0] == 400
            assert _post(url + "/score", {"items": []}, {"origin": "http://evil.example"})[0] == 403
            listed = legival("reward", "report", "--db", str(tmp_path / "r.duckdb"), "--resamples", "10")
            assert listed.returncode == 0, listed.stderr  # the store is free while the server runs
            assert listed.summary()["items"] == 4
        send(w, sig)
        code = w.wait(60)
    finally:
        if w.proc.poll() is None:
            w.proc.kill()
            w.wait(30)
    assert_ended_cleanly(w, 0, extra=seen)
    summary = json.loads(w.stdout.strip().splitlines()[-1])
    assert summary["stopped_by"] == sig.name and code == 0


def test_refusals_before_anything_starts_are_one_line(spec: Path, tmp_path: Path) -> None:
    legival("reward", "serve", str(spec), "--host", "0.0.0.0").error("--token-file")
    bad = tmp_path / "token"
    bad.write_text("x" * 40)
    bad.chmod(0o644)
    legival("reward", "serve", str(spec), "--host", "0.0.0.0", "--token-file", str(bad)).error("chmod 600")
    broken = tmp_path / "broken.yaml"
    broken.write_text(yaml.safe_dump({**SPEC, "components": {"transfer": {"weight": -1}}}))
    ran = legival("reward", "serve", str(broken))
    ran.error("broken.yaml")
    assert "components.transfer.weight" in ran.stderr
    legival("reward", "check", str(tmp_path / "none.yaml")).error("cannot read reward spec")
