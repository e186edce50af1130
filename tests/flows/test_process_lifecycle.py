"""Every process a run starts ends with it (issue 39), for every way a run ends.

`legival run` as a user runs it (`tests/flows/_lifecycle.py`: its own session, output through pipes),
held at a point of the run (`tests/plugins/held.py`, the scripted engine's `hold_load`/`hold_after`) and
sent SIGTERM, SIGINT or SIGHUP there: it exits within 15 s with its `cancelled` line and no traceback,
its pipes reach end-of-file within 5 s, and 5 s later nothing of its session or process group runs.
The same after a normal run, a run that fails in the middle, a cancel whose stage does not come back
(the watchdog's forced exit) and SIGKILL of the command (its children gone within 10 s, through the
guardian). Runs held in the transfer resume to the uninterrupted run's store. The temporary Prefect
server (the child that was left behind before) is started by the runs that set no PREFECT_API_URL.
"""

from __future__ import annotations

import json
import os
import signal
import time
from pathlib import Path
from typing import Any

import pytest

from tests.flows._lifecycle import Watched, assert_ended_cleanly, below, left_behind, send, start, wait_for
from tests.flows._orchestration import small_traces, table_snapshot, write_spec

pytestmark = pytest.mark.slow

TEACHERS = ["gpt-oss-20b", "qwen3-4b"]
GRACE_S = 15.0


@pytest.fixture(scope="module")
def env(tmp_path_factory: pytest.TempPathFactory, prefect_api: str) -> dict[str, str]:
    """The session's Prefect API (no server start per run); `own_server` runs drop it."""
    home = tmp_path_factory.mktemp("prefect-home")
    plugins = ",".join(p for p in [os.environ.get("LEGIVAL_PLUGINS", ""), "tests.plugins.scripted",
                                   "tests.plugins.held"] if p)
    return {**os.environ, "PREFECT_HOME": str(home), "PREFECT_API_URL": prefect_api, "LEGIVAL_PLUGINS": plugins,
            "PREFECT_SERVER_ANALYTICS_ENABLED": "false", "HF_HUB_OFFLINE": "1"}


@pytest.fixture(scope="module")
def own_server_env(env: dict[str, str], tmp_path_factory: pytest.TempPathFactory) -> dict[str, str]:
    """No Prefect API: the run starts Prefect's temporary server itself (one home for the module, so
    its database is migrated once)."""
    out = {k: v for k, v in env.items() if k != "PREFECT_API_URL"}
    out["PREFECT_HOME"] = str(tmp_path_factory.mktemp("prefect-home-own"))
    return out


@pytest.fixture(scope="module")
def traces(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return small_traces(tmp_path_factory.mktemp("traces") / "traces.jsonl", problems=3)


def _spec(folder: Path, traces: Path, **backend: Any) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    return write_spec(folder, TEACHERS, traces=traces, limit=2, backend_options=backend,
                      quality={"enabled": True, "metrics": ["held_quality"]})


def _summary(w: Watched) -> dict[str, Any]:
    return dict(json.loads(w.stdout.strip().splitlines()[-1]))


@pytest.fixture(scope="module")
def reference(tmp_path_factory: pytest.TempPathFactory, own_server_env: dict[str, str], traces: Path) -> Path:
    """The uninterrupted run (on Prefect's temporary server): it ends cleanly too. Its store."""
    folder = tmp_path_factory.mktemp("reference")
    w = start(["run", str(_spec(folder, traces))], own_server_env)
    assert w.wait(600) == 0, w.stderr[-3000:]
    assert_ended_cleanly(w, 0)
    assert _summary(w)["rollouts_generated"] > 4
    return folder / "store.duckdb"


POINTS = [  # where the run is held, the signal sent there, and whether it runs its own Prefect server
    ("efficiency", signal.SIGTERM, False),
    ("load", signal.SIGINT, False),
    ("transfer", signal.SIGHUP, True),
    ("quality", signal.SIGTERM, False),
    ("report", signal.SIGINT, False),
]


@pytest.mark.parametrize(("point", "sig", "own_server"), POINTS, ids=[p[0] for p in POINTS])
def test_a_cancel_anywhere_in_the_run_ends_everything_and_the_rerun_resumes(
        tmp_path: Path, env: dict[str, str], own_server_env: dict[str, str], traces: Path, reference: Path,
        point: str, sig: signal.Signals, own_server: bool) -> None:
    mark, gate = tmp_path / "held", tmp_path / "gate"
    backend: dict[str, Any] = {}
    run_env = dict(own_server_env if own_server else env)
    if point == "load":
        backend = {"hold_load": True, "gate": str(gate), "hold_mark": str(mark)}
    elif point == "transfer":
        backend = {"hold_after": 2, "gate": str(gate), "hold_mark": str(mark)}
    else:
        run_env.update(LEGIVAL_TEST_HOLD=point, LEGIVAL_TEST_HOLD_MARK=str(mark), LEGIVAL_TEST_HOLD_GATE=str(gate))
    spec = _spec(tmp_path / "run", traces, **backend)
    w = start(["run", str(spec)], run_env)
    wait_for(mark.exists, w, 300, f"the run held at {point}")
    sent = send(w, sig)
    code = w.wait(60)
    assert time.monotonic() - sent < GRACE_S, f"exit {time.monotonic() - sent:.1f} s after {sig.name}"
    assert_ended_cleanly(w, 128 + sig)
    assert f"cancelled ({sig.name}" in w.stderr and "10 s after the signal" not in w.stderr, w.stderr[-3000:]
    assert _summary(w)["cancelled"] == sig.name and code == 128 + sig

    gate.touch()  # the rerun is not held
    again = start(["run", str(spec)], {k: v for k, v in run_env.items() if not k.startswith("LEGIVAL_TEST_HOLD")})
    assert again.wait(600) == 0, again.stderr[-3000:]
    assert_ended_cleanly(again, 0)
    assert table_snapshot(tmp_path / "run" / "store.duckdb") == table_snapshot(reference)


def test_a_run_that_fails_in_the_middle_ends_everything(tmp_path: Path, own_server_env: dict[str, str],
                                                         traces: Path) -> None:
    """The trace file vanishes when the flow reads the spec (tests/plugins/vanishing_traces.py)."""
    mine = tmp_path / "traces.jsonl"
    mine.write_bytes(traces.read_bytes())
    spec = _spec(tmp_path / "run", mine)
    run_env = {**own_server_env, "LEGIVAL_PLUGINS": own_server_env["LEGIVAL_PLUGINS"] + ",tests.plugins.vanishing_traces",
               "LEGIVAL_TEST_VANISH": str(mine)}
    w = start(["run", str(spec)], run_env)
    assert w.wait(300) == 2
    assert_ended_cleanly(w, 2)
    (line,) = [ln for ln in w.stderr.splitlines() if ln.startswith("error: ")]
    assert "trace file(s) not found" in line, w.stderr[-3000:]


def test_a_stage_that_ignores_the_cancel_meets_the_watchdog_and_still_leaves_nothing(
        tmp_path: Path, env: dict[str, str], traces: Path) -> None:
    """A unit stuck past the grace (native code that never looks at the cancel): the watchdog forces
    the exit 10 s after the signal, and every child ends all the same."""
    mark = tmp_path / "held"
    spec = _spec(tmp_path / "run", traces)
    w = start(["run", str(spec)], {**env, "LEGIVAL_TEST_HOLD": "efficiency", "LEGIVAL_TEST_HOLD_MARK": str(mark),
                                   "LEGIVAL_TEST_HOLD_STUBBORN": "1"})
    wait_for(mark.exists, w, 300, "the run held at efficiency")
    sent = send(w, signal.SIGTERM)
    w.wait(60)
    assert 9.5 < time.monotonic() - sent < GRACE_S, time.monotonic() - sent
    assert_ended_cleanly(w, 128 + signal.SIGTERM)
    assert "cancelled (SIGTERM; 10 s after the signal)" in w.stderr, w.stderr[-3000:]


def test_sigkill_of_the_command_ends_its_children_within_10_s(tmp_path: Path, own_server_env: dict[str, str],
                                                              traces: Path) -> None:
    """Nothing of the command runs after SIGKILL: the guardian (legival_core/lifecycle/guardian.py) ends the
    Prefect server, the local Ray with its daemons and engines, and itself."""
    mark, gate = tmp_path / "held", tmp_path / "gate"
    spec = _spec(tmp_path / "run", traces, hold_after=2, gate=str(gate), hold_mark=str(mark))
    w = start(["run", str(spec)], own_server_env)
    wait_for(mark.exists, w, 300, "the run held in its transfer")
    children = below(w.pid)
    assert len(children) >= 3, children  # the Prefect server, the guardian, the local Ray's helper (and Ray)
    w.proc.kill()
    w.wait(30)
    assert w.pipes_closed_within(10), "a child still holds the command's output 10 s after its SIGKILL"
    left = left_behind(w, extra=children)
    assert not left, "still running after the command's SIGKILL:\n" + "\n".join(left)
