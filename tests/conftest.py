"""Shared test fixtures.

Tests that need the real data in ../shared/data use the `shared_data` fixture: it skips with a
message when the folder is absent (a fresh clone) and runs whenever it is there (CI has it).
"""

from __future__ import annotations

import os
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
