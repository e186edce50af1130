"""The Goodhart watch (legival_core/rl/watch.py, docs/reward.md): buckets by step, means with bootstrap
bands, the transfer-watch gap over correct completions, and its change flagged when it widens; `legival
reward report` gates on it (`--fail-on gap:DELTA`), and `legival report` carries reward_watch.csv and its
dashboard section (one schema: a not-run row without a log)."""

from __future__ import annotations

from datetime import datetime, timedelta
from pathlib import Path

import polars as pl
import pytest

from legival_core.rl.watch import bucketed, gap_change, watch_table
from legival_core.store import Store
from legival_core.store.journal import Journal
from tests._cli import legival

T0 = datetime(2026, 12, 5)


def rows(widening: bool, steps: int = 6, per_step: int = 20) -> list[dict[str, object]]:
    out = []
    for step in range(steps):
        for i in range(per_step):
            transfer = 0.5 + (0.05 * step if widening else 0.0)  # the reward's student learns to like the policy
            watch = 0.5 - (0.02 * step if widening else 0.0) + (0.01 if i % 2 else -0.01)
            out.append({"log_key": f"k{step}-{i}", "reward_name": "legibility", "spec_hash": "h", "source": "trl",
                        "step": step, "tag": None, "group_id": f"g{i % 4}", "reward": 1.0 + 0.5 * transfer,
                        "correct": i % 5 != 0, "transfer": transfer if i % 5 else 0.0, "watch": watch if i % 5 else 0.0,
                        "components": "{}", "error": None, "scored_at": T0 + timedelta(seconds=step * 100 + i)})
    return out


def test_buckets_means_and_the_gap_by_hand() -> None:
    frame = pl.DataFrame(rows(False, steps=2, per_step=5))
    table = watch_table(frame, buckets=10, resamples=0)
    assert table["step_from"].to_list() == [0, 1] and table["n"].to_list() == [5, 5]
    assert table["correct"].to_list() == [0.8, 0.8]  # one in five is wrong
    # over the 4 correct items of a step: transfer 0.5, watch 0.5 +- 0.01 (i = 1, 2, 3, 4: +, -, +, -)
    assert table["transfer"].to_list() == [0.5, 0.5] and table["gap"][0] == pytest.approx(0.0)
    assert table["gap_low"][0] is None  # no resamples: no band
    many = bucketed(pl.DataFrame(rows(False, steps=30, per_step=1)), 10)
    assert many["bucket"].n_unique() == 10 and many.filter(pl.col("x") == 29)["bucket"][0] == 9


def test_a_widening_gap_is_flagged_and_a_steady_one_is_not() -> None:
    wide = gap_change(pl.DataFrame(rows(True)), buckets=6, resamples=300)
    assert wide.widening and wide.change == pytest.approx(0.07 * 5, abs=0.02) and wide.low > 0
    steady = gap_change(pl.DataFrame(rows(False)), buckets=6, resamples=300)
    assert not steady.widening and abs(steady.change) < 0.02


@pytest.fixture
def logged(tmp_path: Path) -> Path:
    db = tmp_path / "s.duckdb"
    Store(db).close()
    with Journal(db) as j:
        j.append("reward_log", rows(True))
    return db


def test_reward_report_reads_the_journal_and_gates_on_the_gap(logged: Path, tmp_path: Path) -> None:
    ran = legival("reward", "report", "--db", logged, "--out", tmp_path / "w", "--resamples", "200", "--buckets", "6",
                  "--fail-on", "gap:0.1")
    assert ran.returncode == 1, ran.stderr  # widened by ~0.35 > 0.1
    s = ran.summary()
    assert s["items"] == 120 and s["widening"] and s["failed"] and "WIDENING" in ran.stdout
    assert sorted(p.name for p in (tmp_path / "w").iterdir()) == [".legival-output.json", "index.html",
                                                                    "reward_watch.csv", "reward_watch.png"]
    ok = legival("reward", "report", "--db", logged, "--resamples", "50", "--fail-on", "gap:1")
    assert ok.returncode == 0 and not ok.summary()["failed"]
    legival("reward", "report", "--db", logged, "--fail-on", "watch:1").error("--fail-on")
    legival("reward", "report", "--db", logged, "--name", "nope").error("no reward 'nope'")


def test_the_benchmark_report_carries_the_watch_with_one_schema(logged: Path, tmp_path: Path) -> None:
    from tests.conftest import EXAMPLES

    traces = EXAMPLES / "gsm8k_md_eval_cot_5teachers.jsonl"
    assert legival("ingest", traces, "--db", logged).returncode == 0
    assert legival("report", "--db", logged, "--out", tmp_path / "r", "--resamples", "0").returncode == 0
    table = pl.read_csv(tmp_path / "r" / "reward_watch.csv")
    assert set(table["status"].to_list()) == {"computed"} and table.height == 6
    assert 'id="pf-reward"' in (tmp_path / "r" / "index.html").read_text()
    empty = tmp_path / "e.duckdb"
    assert legival("ingest", traces, "--db", empty).returncode == 0
    assert legival("report", "--db", empty, "--out", tmp_path / "r2", "--resamples", "0").returncode == 0
    none = pl.read_csv(tmp_path / "r2" / "reward_watch.csv")
    assert none.columns == table.columns and none["status"][0].startswith("not run: legival reward serve")
