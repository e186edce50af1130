"""Shared test fixtures.

Tests that need the real data in ../shared/data use the `shared_data` fixture: it skips with a
message when the folder is absent (a fresh clone) and runs whenever it is there (CI has it).
"""

from __future__ import annotations

import json
import os
import re
from collections.abc import Iterator
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
SHARED_DATA = Path(os.environ.get("LEGIVAL_SHARED_DATA", REPO.parent / "shared" / "data"))
FIXTURES = Path(__file__).resolve().parent / "fixtures"
EXAMPLES = REPO / "examples" / "data"

# The test-only backends (`scripted`, `scripted-demo`) are registry plugins; the variables are set
# before anything imports the registry, and are inherited by subprocesses, Prefect workers and Ray
# engines, which find `tests.plugins` through PYTHONPATH.
os.environ["LEGIVAL_PLUGINS"] = ",".join(
    p for p in [*os.environ.get("LEGIVAL_PLUGINS", "").split(","), "tests.plugins.scripted"] if p
)
os.environ["PYTHONPATH"] = os.pathsep.join(p for p in (str(REPO), os.environ.get("PYTHONPATH", "")) if p)
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
os.environ.setdefault("PREFECT_SERVER_ANALYTICS_ENABLED", "false")
# Crash logs of in-process commands (legival_core/crashlog.py) go to the temp directory, not the repo.
os.environ.setdefault("LEGIVAL_CRASH_DIR", os.path.join(os.environ.get("TMPDIR", "/tmp"), "legival-test-crashes"))
# Hypothesis keeps caches in ./.hypothesis even without an example database: outside the repository
# for every property test (tests/fuzz, tests/core/reports), nothing is written into the repository.
os.environ.setdefault("HYPOTHESIS_STORAGE_DIRECTORY", os.path.join(os.environ.get("TMPDIR", "/tmp"), "legival-hypothesis"))


def _threads_per_worker() -> int | None:
    """Under pytest-xdist, each worker's share of the CPUs (the OpenMP threads of torch, ONNX Runtime
    and the engines' processes), set before anything imports torch. Without it every worker starts one
    thread per core: on 2 cores, 2 workers run 4 OpenMP threads whose busy-waiting takes CPU from the
    other worker's, and the suite is CPU-bound (measured in docs/testing.md)."""
    workers = os.environ.get("PYTEST_XDIST_WORKER_COUNT", "")
    if not workers.isdigit() or int(workers) < 2:
        return None
    cpus = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)
    return max(1, cpus // int(workers))


if (_threads := _threads_per_worker()) is not None:
    for _var in ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS"):
        os.environ.setdefault(_var, str(_threads))


@pytest.fixture(scope="session")
def shared_data() -> Path:
    if not SHARED_DATA.is_dir():
        pytest.skip(f"needs ../shared/data (absent: {SHARED_DATA})")
    return SHARED_DATA


@pytest.fixture
def store(tmp_path: Path):
    from legival_core.store import Store

    s = Store(tmp_path / "t.duckdb")
    yield s
    s.close()


# ------------------------------------------------------------------------------- paid once per session


@pytest.fixture(scope="session")
def prefect_api() -> Iterator[str]:
    """One real Prefect API for the session (Prefect's test harness: a server subprocess on a free port
    with a temporary database), active for every test from the first that asks for it; its URL is what
    subprocesses get as PREFECT_API_URL so that they start no server of their own."""
    from prefect.settings import PREFECT_API_URL
    from prefect.testing.utilities import prefect_test_harness

    with prefect_test_harness(server_startup_timeout=120):
        url = PREFECT_API_URL.value()
        assert url, "the Prefect test harness set no API URL"
        yield str(url)


def forget_prefect_runs() -> None:
    """Delete every flow run (their task runs go with them, in bulk) and artifact the session's
    Prefect API holds. Through Prefect's own client, which retries what the server answers while its
    SQLite database is busy (503)."""
    from prefect.client.orchestration import get_client

    with get_client(sync_client=True) as client:
        http = client._client  # PrefectHttpxSyncClient: the retrying transport of every Prefect call
        while http.post("/flow_runs/bulk_delete", json={}).json()["deleted"]:
            pass
        while artifacts := client.read_artifacts(limit=200):
            for artifact in artifacts:
                client.delete_artifact(artifact.id)


# pytest-xdist (`make test`: `-n auto --dist loadgroup --no-loadscope-reorder`) hands out groups of
# tests, each run on one worker: a module stays together (its module-scoped fixtures are built once),
# tests that share a session resource are one group whatever their module (the resource starts once,
# not once per worker: the group follows from the fixtures a test uses), and a module may name its own
# group (`pytest.mark.xdist_group`, e.g. the modules sharing one vLLM engine). Groups are handed out
# longest first (their tests' durations measured in `tests/durations.json`, refreshed by
# `make test-durations`), so that no worker is left with a long one at the end while the others idle.
XDIST_GROUPS = {"prefect_api": "prefect", "prefect_harness": "prefect"}
DURATIONS = Path(__file__).resolve().parent / "durations.json"
UNMEASURED_S = 0.5  # a test not in durations.json yet (new): most tests take less
FAST_GROUP_S = 10.0  # `--fast`: a group (module) whose tests together take longer is left to `make test`


def _xdist_group(item: pytest.Item) -> str:
    mark = item.get_closest_marker("xdist_group")
    if mark is not None:
        return str(mark.args[0] if mark.args else mark.kwargs.get("name", "default"))
    groups = {g for f, g in XDIST_GROUPS.items() if f in getattr(item, "fixturenames", ())}
    return "+".join(sorted(groups)) if groups else item.nodeid.split("::", 1)[0]


def _measured_durations() -> dict[str, float]:
    try:
        return {str(k): float(v) for k, v in json.loads(DURATIONS.read_text(encoding="utf-8")).items()}
    except (OSError, ValueError, TypeError, AttributeError):  # TypeError: a value that is not a number
        return {}  # absent or unreadable: every group counts as unmeasured, the order is still valid


@pytest.hookimpl(tryfirst=True)  # before pytest-xdist reads the groups
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    measured = _measured_durations()
    group_of = {item.nodeid: _xdist_group(item) for item in items}
    length: dict[str, float] = {}
    for item in items:
        group = group_of[item.nodeid]
        length[group] = length.get(group, 0.0) + measured.get(item.nodeid, UNMEASURED_S)
        if item.get_closest_marker("xdist_group") is None:
            item.add_marker(pytest.mark.xdist_group(group))
    items.sort(key=lambda item: -length[group_of[item.nodeid]])  # stable: the order inside a group stays
    if _parallel():
        for item in items:
            if item.get_closest_marker("timing"):
                item.add_marker(pytest.mark.skip(reason=TIMING_ALONE))
    if config.getoption("--fast"):
        slow = [i for i in items if length[group_of[i.nodeid]] > FAST_GROUP_S or i.get_closest_marker("timing")
                or i.get_closest_marker("slow") or i.get_closest_marker("vllm")]
        if slow:
            config.hook.pytest_deselected(items=slow)
            left_out = set(slow)
            items[:] = [i for i in items if i not in left_out]


TIMING_ALONE = ("measures wall time, so it runs alone: `make test` runs the timing tests after the parallel "
                "suite (`pytest -m timing`)")


def _parallel() -> bool:
    """Inside pytest-xdist with more than one worker: other tests share the CPUs."""
    return os.environ.get("PYTEST_XDIST_WORKER_COUNT", "1") not in ("", "0", "1")


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption(
        "--fast",
        action="store_true",
        help=f"only the groups measured under {FAST_GROUP_S:g} s in {DURATIONS.name} and not marked slow/vllm "
        "(`make test-fast`, the inner loop)",
    )
    parser.addoption(
        "--store-durations",
        action="store_true",
        help=f"write every test's duration (setup + call + teardown) to {DURATIONS.name} at the end",
    )


_GROUP_SUFFIX = re.compile(r"@[^@\[\]]*$")


class _DurationRecorder:
    """Sums each test's phase durations as the reports arrive (on the xdist controller, which sees every
    worker's reports) and merges them into the file when the session ends without a failure (a run of
    one module refreshes that module's lines)."""

    def __init__(self) -> None:
        self.seconds: dict[str, float] = {}

    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        nodeid = _GROUP_SUFFIX.sub("", report.nodeid)  # `--dist loadgroup` reports `test@group`
        self.seconds[nodeid] = self.seconds.get(nodeid, 0.0) + report.duration

    def pytest_sessionfinish(self, session: pytest.Session, exitstatus: int) -> None:
        if exitstatus != 0 or not self.seconds:
            return  # a partial or failing run would teach the scheduler wrong lengths
        merged = {**_measured_durations(), **{k: round(v, 1) for k, v in self.seconds.items()}}
        DURATIONS.write_text(json.dumps(dict(sorted(merged.items())), indent=0) + "\n", encoding="utf-8")


def pytest_configure(config: pytest.Config) -> None:
    if config.getoption("--store-durations") and not hasattr(config, "workerinput"):
        config.pluginmanager.register(_DurationRecorder(), "legival-durations")
