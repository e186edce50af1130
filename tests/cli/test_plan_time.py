"""Issue 28: `legival plan`'s transfer time against the time the transfer then takes, on real traces
with long ones among them (../shared/data), two teachers, six transfer traces each, the embedded
SmolLM2 student: `benchmarks/plan_time.py`'s scenario (calibrate, plan, run) at a test's size.

It measures wall time, so it runs alone: marked `timing`, skipped inside the parallel suite and run by
`make test` after it (tests/conftest.py). Each command is its own process, as a user runs them, so
no command's clock includes another's leftover threads. (An in-process second run once hung here, CI:
its `ray.init` forked the driver beside the first command's Prefect threads; a local Ray is now started
by a helper process instead, tasks/local_ray.py.)
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pytest

from benchmarks.plan_time import scenario, write_workload
from tests._cli import entry_point

pytestmark = [pytest.mark.timing, pytest.mark.slow]


def _legival(argv: Sequence[str]) -> dict[str, Any]:
    ran = entry_point(*argv, timeout=600)
    assert ran.returncode == 0, (argv, ran.stderr[-3000:])
    return ran.summary()


def test_planned_transfer_time_against_the_actual(shared_data: Path, tmp_path: Path, prefect_api: str) -> None:
    spec = write_workload(tmp_path, shared_data / "reasoning_traces" / "gsm8k", teachers=2, traces=6, long=2,
                          max_new_tokens=24, forcing_max_tokens=16)
    r = scenario(spec, _legival)
    print("\n".join(r.lines()))
    (up, ua), (cp, ca) = r.uncalibrated, r.calibrated
    assert min(r.rollouts) > 0
    # the table's row alone (nothing stored yet): within a factor of 2
    assert 0.5 <= up / ua <= 2.0, r.lines()
    # calibrated on the sample's timings (same machine, same engine): within 25%
    assert 0.75 <= cp / ca <= 1.25, r.lines()
    # `legival runs` shows the run's ratio
    runs = _legival(["runs", "--db", str(tmp_path / "store.duckdb")])["runs"]
    assert runs[-1]["transfer_time_ratio"] == round(cp / ca, 2)
    assert (runs[-1]["transfer_planned_s"], runs[-1]["transfer_actual_s"]) == (cp, ca)
