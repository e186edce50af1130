"""`benchmarks/scale.py` at a tiny scale: it builds its synthetic store through the product's store,
runs the four measurements in fresh processes and prints each figure next to its target; the resume
plan finds exactly the rollouts it deleted, and the commit phase stores every row it commits. No
timing is asserted (the figures are the benchmark's business, docs/orchestration.md "Scale")."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from tests.conftest import REPO


def test_scale_benchmark_runs_at_tiny_scale(tmp_path: Path) -> None:
    store = tmp_path / "scale.duckdb"
    cmd = [sys.executable, str(REPO / "benchmarks" / "scale.py"), "--traces", "300", "--store", str(store),
           "--commit-rows", "2000"]
    r = subprocess.run(cmd, cwd=REPO, capture_output=True, text=True, timeout=900, check=False)
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    lines = r.stdout.strip().splitlines()
    for label in ("(a) resume plan", "(b) commit", "(c) report", "(d) peak RSS", "(e) legival plan examples/paper.yaml"):
        line = next((x for x in lines if x.startswith(label)), None)
        assert line is not None and "target <" in line, (label, r.stdout)
    result = json.loads(lines[-1])
    assert set(result["figures"]) == set(result["targets"]) == {"resume_plan_s", "commit_s", "report_s", "peak_rss_gib",
                                                                   "paper_plan_s"}
    gen, res, com, rep = result["generate"], result["resume"], result["commit"], result["report"]
    assert gen["traces"] == 288 and gen["rollouts"] > 10_000
    assert gen["segmentation_matches"] == gen["segmentation_checked"] > 0  # the stored spans are Punkt's
    assert res["exact"] is True and result["exact"] is True
    assert res["deleted"] == res["planned_missing"] == res["sampled"] > 0
    assert res["shards"] == 72
    assert com["rows"] == com["stored"] == 2000 and com["commits"] > 1
    # as the engine pool hands them over: sets of finished chunks, never more transactions than chunks;
    # the baseline: one transaction per chunk
    per = result["commit_per_chunk"]
    assert com["commits"] <= com["chunks"] and per["rows"] == per["stored"] == 2000
    assert per["commits"] == per["chunks"] == com["chunks"]
    assert rep["files"] >= 15 and rep["resamples"] == 1000 and rep["rollouts_counted"] == gen["rollouts"]
    assert result["store_bytes"] == store.stat().st_size
    pln = result["plan"]  # the paper matrix's teachers generate: their rollouts wait for their traces
    # 13 teachers x (5,000 MATH + the 3 GPQA and 2 Connections stand-ins of examples/paper.yaml)
    assert pln["generations"] == 13 * (5000 + 3 + 2) and pln["judge_calls"] == gen["traces"] and pln["paper_plan_s"] > 0
    # the generated store stays for the next run (which skips generation); the measured copy is gone
    assert sorted(p.name for p in tmp_path.iterdir()) == ["scale.duckdb"]
