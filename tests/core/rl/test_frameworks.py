"""The reward called by the frameworks' own code (issue 47), in .venv-rl (scripts/setup_rl_frameworks.sh:
verl pins a transformers older than Legi-Val's; OpenRLHF cannot install whole without CUDA):

- verl 0.9.1's own reward loop loads `legival_core.rl.verl.compute_score` from
  `reward.custom_reward_function.path=pkg://legival_core.rl.verl` and scores a DataProto: the score of
  a correct completion is above a wrong one's, every sample has the same extra keys;
- OpenRLHF 0.11.2's own remote-reward client (`openrlhf/utils/agent.py`,
  `SingleTurnAgentExecutor._fetch_rewards_via_http`: `{"query", "prompts", "labels"}` posted once per
  rollout) reads `legival reward serve`'s `/get_reward` answers.
The students are the scripted backend (tests/plugins/scripted.py)."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml

from tests.conftest import REPO
from tests.flows._lifecycle import assert_ended_cleanly, below, send, start, wait_for

pytestmark = pytest.mark.slow
RL_PYTHON = REPO / ".venv-rl" / "bin" / "python"
SCRIPTS = Path(__file__).parent / "framework_scripts"
if not RL_PYTHON.exists():
    pytest.skip("verl and OpenRLHF are not installed: bash scripts/setup_rl_frameworks.sh (a venv .venv-rl)",
                allow_module_level=True)

SPEC = {"name": "legibility", "dataset": "gsm8k", "components": {
    "correct": {"weight": 1.0}, "format": {"weight": 0.1},
    "transfer": {"weight": 0.5, "step_interval": 2, "max_new_tokens": 32,
                 "student": {"name": "scripted-demo", "backend": "scripted-demo", "model": "scripted-demo-v1"}}}}


@pytest.fixture(scope="module")
def spec(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("rl") / "reward.yaml"
    path.write_text(yaml.safe_dump(SPEC))
    return path


def _model_dir() -> str:
    from legival_core.backends.smollm2 import smollm2_safetensors_dir

    return str(smollm2_safetensors_dir())  # only its tokenizer is read


def test_verls_own_reward_loop_scores_with_compute_score(spec: Path) -> None:
    env = {**os.environ, "LEGIVAL_REWARD_SPEC": str(spec)}
    ran = subprocess.run([str(RL_PYTHON), str(SCRIPTS / "verl_reward_loop.py"), _model_dir()], env=env, cwd=REPO,
                         capture_output=True, text=True, timeout=600)
    assert ran.returncode == 0, ran.stderr[-3000:]
    got = json.loads(ran.stdout.strip().splitlines()[-1])
    scores, extra = got["scores"], got["extra"]
    assert scores[0] > scores[1] and scores[2] > scores[1]  # correct completions earn more than the wrong one
    assert len({tuple(sorted(e)) for e in extra}) == 1  # verl takes the keys from the first sample
    assert [e["correct"] for e in extra] == [1.0, 0.0, 1.0] and extra[0]["legival_format"] == 1.0
    assert got["token_level"] == pytest.approx(scores)  # the score sits on the response's last token


@pytest.fixture(scope="module")
def server(spec: Path) -> Iterator[str]:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    w = start(["reward", "serve", str(spec), "--port", str(port), "--cpus", "2"], {**os.environ})
    seen: list[int] = []
    try:
        wait_for(lambda: any(ln.startswith("http://") for ln in w.out), w, 240, "the server's URL")
        seen = below(w.pid)
        yield f"http://127.0.0.1:{port}"
    finally:
        if w.proc.poll() is None:
            send(w, __import__("signal").SIGTERM)
            w.wait(60)
    assert_ended_cleanly(w, 0, extra=seen)


def test_openrlhfs_own_client_reads_get_reward(server: str) -> None:
    ran = subprocess.run([str(RL_PYTHON), str(SCRIPTS / "openrlhf_client.py"), server + "/get_reward", _model_dir()],
                         cwd=REPO, capture_output=True, text=True, timeout=600)
    assert ran.returncode == 0, ran.stderr[-3000:]
    outs = json.loads(ran.stdout.strip().splitlines()[-1])
    assert len(outs) == 4 and all(len(o["reward"]) == 1 for o in outs)
    right, wrong = outs[0]["reward"][0], outs[1]["reward"][0]
    assert right > wrong and outs[2]["reward"] == outs[0]["reward"]
    assert outs[0]["extra_logs"]["legival_correct"] == [1.0] and outs[1]["extra_logs"]["legival_correct"] == [0.0]


def test_verl_forwards_to_the_server(spec: Path, server: str) -> None:
    env = {**os.environ, "LEGIVAL_REWARD_SPEC": str(spec), "LEGIVAL_REWARD_URL": server}
    code = ("import json; from legival_core.rl.verl import compute_score; print(json.dumps(compute_score("
            "'gsm8k', '9 + 9 = 18. The answer is \\\\boxed{18}.', '18', {'question': 'Tom has 9 apples and buys 9 more.'})))")
    ran = subprocess.run([sys.executable, "-c", code], env=env, cwd=REPO, capture_output=True, text=True, timeout=300)
    assert ran.returncode == 0, ran.stderr[-3000:]
    got = json.loads(ran.stdout.strip().splitlines()[-1])
    assert got["correct"] == 1.0 and got["score"] >= 1.0 and got["legival_refused"] == 0.0
