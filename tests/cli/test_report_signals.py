"""A report interrupted while it writes leaves nothing behind (issue 38 item 6).

`legival report` runs as a user runs it (its own session, output through pipes), held mid-write by the
`held_report` test plugin (its CSVs written into the temporary directory beside --out, its figures not
yet), then signalled: SIGTERM, SIGINT or SIGHUP end it with one line and exit 128 + the signal, the
temporary directory removed and the previous report untouched. After SIGKILL (nothing can clean up)
the next report removes what the killed one left; a report still being written is never touched.
"""

from __future__ import annotations

import hashlib
import os
import signal
import subprocess
import sys
import threading
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from legival_core.store import Store
from tests._cli import legival
from tests.conftest import REPO
from tests.synthetic import fill_synthetic


@pytest.fixture(scope="module")
def db(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("report-signals") / "s.duckdb"
    with Store(path) as store:
        fill_synthetic(store, teachers=("a", "b"), traces_per_cell=4, seed=3)
    return path


def _digest(folder: Path) -> dict[str, str]:
    return {p.name: hashlib.sha256(p.read_bytes()).hexdigest() for p in sorted(folder.iterdir()) if p.is_file()}


def _leftovers(out: Path) -> list[str]:
    return sorted(p.name for p in out.parent.iterdir() if p.name.startswith(f".{out.name}."))


@dataclass
class Held:
    proc: subprocess.Popen[str]
    tmp: Path
    gate: Path


@pytest.fixture
def previous(db: Path, tmp_path: Path) -> tuple[Path, dict[str, str]]:
    """A complete report in `out`, and its files' digests."""
    out = tmp_path / "report"
    r = legival("report", "--db", str(db), "--out", str(out), "--resamples", "0")
    assert r.returncode == 0, r.stderr[-2000:]
    return out, _digest(out)


@pytest.fixture
def held(db: Path, tmp_path: Path, previous: tuple[Path, dict[str, str]]) -> Iterator[Held]:
    """`legival report` held mid-write into a temporary directory beside the previous report."""
    out = previous[0]
    marker, gate = tmp_path / "held", tmp_path / "gate"
    env = {**os.environ, "LEGIVAL_PLUGINS": f"{os.environ.get('LEGIVAL_PLUGINS', '')},tests.plugins.held_report",
           "LEGIVAL_TEST_REPORT_HELD": str(marker), "LEGIVAL_TEST_REPORT_GATE": str(gate)}
    proc = subprocess.Popen([sys.executable, "-m", "legival", "report", "--db", str(db), "--out", str(out),
                             "--resamples", "0"], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=REPO,
                            env=env, start_new_session=True)
    reached = threading.Event()
    try:
        while not marker.exists():  # the plugin writes it once the CSVs are in the temporary directory
            assert proc.poll() is None, proc.communicate()[1][-3000:]
            reached.wait(0.05)
        tmp = Path(marker.read_text(encoding="utf-8"))
        assert tmp.is_dir() and tmp.parent == out.parent and any(tmp.iterdir())
        yield Held(proc, tmp, gate)
    finally:
        if proc.poll() is None:  # a failed assertion above: say so rather than hide it
            proc.kill()
            proc.communicate(timeout=30)
            pytest.fail("the held report was still running after its test")


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT, signal.SIGHUP])
def test_a_signal_mid_write_removes_the_temporary_directory(held: Held, previous: tuple[Path, dict[str, str]],
                                                            sig: signal.Signals) -> None:
    out, before = previous
    held.proc.send_signal(sig)
    stdout, stderr = held.proc.communicate(timeout=30)
    assert held.proc.returncode == 128 + sig, (held.proc.returncode, stderr[-3000:])
    assert "Traceback" not in stderr, stderr[-3000:]
    assert stderr.strip().splitlines()[-1].startswith("error: interrupted"), stderr[-3000:]
    assert not held.tmp.exists() and _leftovers(out) == []
    assert _digest(out) == before  # the previous report, byte for byte


def test_after_sigkill_the_next_report_removes_what_the_killed_one_left(
        held: Held, previous: tuple[Path, dict[str, str]], db: Path) -> None:
    out, _ = previous
    held.proc.kill()
    held.proc.communicate(timeout=30)
    assert held.tmp.exists()  # nothing could clean up after SIGKILL
    r = legival("report", "--db", str(db), "--out", str(out), "--resamples", "0")
    assert r.returncode == 0, r.stderr[-2000:]
    assert _leftovers(out) == [] and (out / "index.html").exists()


def test_a_report_being_written_is_not_cleaned_by_another(held: Held, previous: tuple[Path, dict[str, str]],
                                                          db: Path) -> None:
    out, _ = previous
    r = legival("report", "--db", str(db), "--out", str(out), "--resamples", "0")  # beside the held one
    assert r.returncode == 0, r.stderr[-2000:]
    assert held.tmp.exists(), "a report still being written lost its directory"
    held.gate.write_text("go")
    _stdout, stderr = held.proc.communicate(timeout=120)
    assert held.proc.returncode == 0, stderr[-3000:]
    assert _leftovers(out) == [] and (out / "index.html").exists()


def test_a_swap_cut_short_gets_the_last_report_back(previous: tuple[Path, dict[str, str]], db: Path) -> None:
    """Killed between the two renames of the swap: no `out`, the old report in its backup. The next
    report puts the backup back before it starts, so a failure of that report still leaves one."""
    from legival_core.outputs import clean_leftovers

    out, before = previous
    backup = out.parent / f".{out.name}.old-deadbeef"
    out.rename(backup)
    assert clean_leftovers(out) == [] and _digest(out) == before and _leftovers(out) == []
