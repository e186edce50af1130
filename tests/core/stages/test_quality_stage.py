"""The quality stage computes only what is missing; unavailable models leave NULL rows that a later run
with the model replaces; the CLI runs end to end on the bundled traces."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from legival_core.catalog import MPNET, SMOLLM2
from legival_core.quality._local import Unavailable
from legival_core.quality.clarity import clarity
from legival_core.quality.group import group_defs, resolve_groups
from legival_core.registry import entry
from legival_core.reports.compute.quality_table import quality_teacher_table
from legival_core.stages.base import store_access
from legival_core.stages.ingest import ingest_file
from legival_core.stages.quality import QualityConfig, QualityStage, compute_quality
from legival_core.store import Store
from tests._cli import legival as run_legival
from tests._sql import rows
from tests.conftest import EXAMPLES
from tests.core.quality.test_quality_consistency import tiny_nli_dir

BUNDLED = EXAMPLES / "gsm8k_md_eval_cot_5teachers.jsonl"


def _one(store: Store, sql: str) -> tuple[Any, ...]:
    return rows(store, sql)[0]


@pytest.fixture
def small(store: Store, tmp_path: Path) -> Store:
    lines = BUNDLED.read_text().splitlines()
    f = tmp_path / "ten.jsonl"
    f.write_text("\n".join(lines[::8]) + "\n")  # 10 traces, all five teachers
    ingest_file(store, f)
    return store


def test_second_run_computes_nothing(small: Store) -> None:
    s1 = compute_quality(small, ["clarity", "z3", "nli"])
    assert s1.computed["clarity"] == 10 and s1.rows["clarity"] == 50
    assert s1.z3_extracted + s1.z3_unparsed == 10 and s1.rows["z3"] == 40
    assert "nli" in s1.unavailable and s1.rows["nli"] == 40
    s2 = compute_quality(small, ["clarity", "z3", "nli"])
    assert sum(s2.rows.values()) == 0 and s2.computed["clarity"] == 0 and s2.computed["z3"] == 0


def test_stored_values_equal_the_pure_functions(small: Store) -> None:
    compute_quality(small, ["clarity_clx", "z3_acs"])
    _, text, value, detail = _one(small,
        "SELECT t.trace_id, t.reasoning, x.value, x.detail FROM trace_metrics x JOIN traces t USING (trace_id) "
        "WHERE x.metric = 'clarity_clx' ORDER BY t.trace_id LIMIT 1")
    assert value == pytest.approx(clarity(text).clx)
    raw = clarity(text).raw  # every raw feature travels in the detail (traces.parquet's clarity_raw_*)
    assert json.loads(detail) == pytest.approx({"fre": raw.fre, "se": raw.se, "dc": raw.dc,
                                                "ss_complexity": raw.ss_complexity}, abs=1e-4)
    params = json.loads(_one(small, "SELECT params FROM trace_metrics WHERE metric = 'clarity_rd' LIMIT 1")[0])
    assert params["reference"]["ref_id"] == "gsm8k-5teachers-v1" and "fre_p95" in params["reference"]
    statuses = {r[0] for r in rows(small, "SELECT status FROM trace_metrics WHERE metric = 'z3_acs'")}
    assert statuses <= {"ok", "unparsed", "undefined", "timeout"}
    assert _one(small, "SELECT count(*) FROM meta WHERE key LIKE 'clarity_reference:%'")[0] == 1


def test_unavailable_rows_are_null_then_replaced_when_the_model_appears(small: Store, tmp_path: Path) -> None:
    nli_dir = tiny_nli_dir(tmp_path / "nli")
    cfg = replace(QualityConfig(), nli_model=str(tmp_path / "later"))
    s = compute_quality(small, ["nli"], cfg)
    assert s.unavailable["nli"] and s.computed["nli"] == 0
    got = rows(small, "SELECT DISTINCT value, status, method FROM trace_metrics WHERE metric = 'nli_intra'")
    assert got == [(None, "unavailable", str(tmp_path / "later"))]
    nli_dir.rename(tmp_path / "later")
    s = compute_quality(small, ["nli"], cfg)
    assert s.computed["nli"] == 10 and not s.unavailable
    ok = _one(small, "SELECT count(*), count(value) FROM trace_metrics WHERE metric LIKE 'nli_%' AND status = 'ok'")
    assert ok == (40, 40)
    assert _one(small, "SELECT count(*) FROM trace_metrics WHERE status = 'unavailable'")[0] == 0
    # value by value: each stored row is `nli_consistency` of the trace's question and reasoning
    from legival_core.quality.consistency import load_nli, nli_consistency

    model = load_nli(str(tmp_path / "later"))
    assert not isinstance(model, Unavailable)
    stored = {(t, m): v for t, m, v in rows(small, "SELECT trace_id, metric, value FROM trace_metrics "
                                                   "WHERE metric LIKE 'nli_%'")}
    texts = rows(small, "SELECT t.trace_id, p.question, t.reasoning FROM traces t JOIN problems p "
                        "ON p.dataset = t.dataset AND p.problem_id = t.problem_id")
    assert len(texts) == 10
    for tid, question, reasoning in texts:
        want = nli_consistency(question, reasoning, model.probs, cfg.nli_window)
        got_row = [stored[tid, m] for m in ("nli_q2s_mean", "nli_q2s_max", "nli_intra", "nli_support")]
        assert got_row == pytest.approx([want.q2s_mean, want.q2s_max, want.intra, want.support], abs=1e-6), tid


def test_cohesion_rows_and_teacher_table(small: Store) -> None:
    s = compute_quality(small, ["cohesion", "clarity", "z3"])
    assert s.computed["cohesion"] == 10
    named = rows(small, "SELECT DISTINCT method, params FROM trace_metrics WHERE metric LIKE 'cohesion%'")
    assert [(m, json.loads(p)["model"]) for m, p in named] == [(MPNET, MPNET)]  # every cohesion row names it
    t = quality_teacher_table(small)
    assert t.height == 5
    for col in ("clarity_clx", "cohesion", "cohesion_band_ratio", "z3_extraction_rate", "dim_coherence",
                "dim_clarity", "dim_consistency", "global_index", "n_dimensions"):
        assert col in t.columns, col
    assert t["global_index"].null_count() == 0


def test_defaults_are_the_catalog_names() -> None:
    cfg = QualityConfig()
    assert (cfg.embed_model, cfg.ppl_model) == (MPNET, SMOLLM2)
    old = group_defs(replace(cfg, ppl_model="smollm2-135m-instruct"))["perplexity"]
    assert json.loads(old.params)["model"] == SMOLLM2 and old.method == SMOLLM2  # one spelling in the rows
    assert old.params == group_defs(cfg)["perplexity"].params


def test_stage_commits_each_chunk_and_is_registered(small: Store) -> None:
    from legival_core.stages.base import run_stage

    info = entry("stage", "quality").meta
    assert info.command == "legival quality --db DB" and info.needs == ("segment",)
    seen: list[tuple[int, int]] = []
    stage = QualityStage("clarity", replace(QualityConfig(), chunk=3))
    s = run_stage(stage, store_access(small), progress=lambda d, n: seen.append((d, n)))
    assert seen == [(0, 10), (3, 10), (6, 10), (9, 10), (10, 10)]
    assert s.computed == {"clarity": 10} and s.rows == {"clarity": 50} and "clarity" in s.seconds
    assert stage.plan(small).units == []


def test_cohesion_plan_carries_the_steps(small: Store) -> None:
    from legival_core.segment import SEGMENTER_VERSION
    from legival_core.stages.base import run_stage
    from legival_core.stages.efficiency import SegmentStage

    stage = QualityStage("cohesion")
    assert stage.registered.needs_steps  # `compute_quality` segments first
    run_stage(SegmentStage(), small)
    units = stage.plan(small).units
    assert len(units) == 10
    for u in units:
        steps = rows(small, "SELECT start_char, end_char FROM steps WHERE trace_id = ? AND segmenter = ? ORDER BY idx",
                     [u.trace_id, SEGMENTER_VERSION])
        assert list(u.spans) == steps and len(steps) >= 1


def test_progress_phases_name_the_group(small: Store) -> None:
    calls: list[tuple[str, int, int]] = []
    compute_quality(small, ["z3", "clarity"], progress=lambda g, d, n: calls.append((g, d, n)))
    assert calls[-1] == ("clarity", 10, 10) and ("z3", 10, 10) in calls


def test_metric_names_resolve_to_groups() -> None:
    assert resolve_groups(["clarity_rd", "clarity", "z3_fas0"]) == ["clarity", "z3"]
    with pytest.raises(ValueError, match="unknown quality metric"):
        resolve_groups(["nope"])


def _legival(*args: str) -> dict[str, Any]:
    p = run_legival(*args)
    assert p.returncode == 0, p.stderr
    return json.loads(p.stdout.strip().splitlines()[-1])


def test_cli_on_the_bundled_traces(tmp_path: Path) -> None:
    db = str(tmp_path / "q.duckdb")
    _legival("ingest", str(BUNDLED), "--db", db)
    s = _legival("quality", "--db", db, "--metrics", "clarity,z3,nli,bertscore")
    assert s["command"] == "quality" and s["computed"]["clarity"] == 80 and s["computed"]["z3"] == 80
    assert set(s["unavailable"]) == {"nli", "bertscore"}
    assert s["z3_extracted"] + s["z3_unparsed"] == 80
    again = _legival("quality", "--db", db, "--metrics", "clarity,z3")
    assert again["computed"] == {"clarity": 0, "z3": 0}
    p = run_legival("quality", "--db", db, "--metrics", "bogus")
    assert p.returncode == 2 and "unknown quality metric" in p.stderr


def _z3_rows(store: Store) -> list[tuple[Any, ...]]:
    return rows(store, "SELECT trace_id, metric, value, status, detail FROM trace_metrics "
                       "WHERE metric LIKE 'z3_%' ORDER BY trace_id, metric")


def test_z3_on_worker_processes_equals_in_process(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The Z3 group runs on a `ProcessExecutor` (every core) by default: the same rows, statuses and
    details as one process, committed chunk by chunk in order (issue 16)."""
    import concurrent.futures

    pools: list[int] = []

    class Spy(concurrent.futures.ProcessPoolExecutor):
        def __init__(self, n: int, **kw: Any) -> None:
            pools.append(n)
            super().__init__(n, **kw)

    monkeypatch.setattr(concurrent.futures, "ProcessPoolExecutor", Spy)
    got = {}
    for workers in (1, 2):
        with Store(tmp_path / f"w{workers}.duckdb") as s:
            ingest_file(s, BUNDLED)
            summary = compute_quality(s, ["z3"], QualityConfig(chunk=10, z3_workers=workers))
            assert summary.computed["z3"] == 80
            got[workers] = _z3_rows(s)
    assert len(got[1]) == 320 and got[1] == got[2]
    assert pools == [2]  # the 2-worker run went through a pool of 2 processes; 1 worker ran in process
    assert {r[3] for r in got[1]} >= {"ok", "unparsed"}


def test_an_ir_that_breaks_the_verifier_fails_alone(small: Store, monkeypatch: pytest.MonkeyPatch) -> None:
    import legival_core.quality.z3_verify as zv

    real, seen = zv.verify_ir, []

    def flaky(ir: Any, **kw: Any) -> Any:
        seen.append(1)
        if len(seen) == 1:
            raise RecursionError("maximum recursion depth exceeded")
        return real(ir, **kw)

    monkeypatch.setattr(zv, "verify_ir", flaky)
    s = compute_quality(small, ["z3"], QualityConfig(z3_workers=1))
    assert s.computed["z3"] == 10
    bad = rows(small, "SELECT DISTINCT trace_id, detail FROM trace_metrics WHERE status = 'error'")
    assert len(bad) == 1 and "RecursionError" in bad[0][1]
    assert _one(small, "SELECT count(*) FROM trace_metrics WHERE metric = 'z3_acs' AND status = 'ok'")[0] >= 1


def test_z3_jss_and_rcr_are_null_unless_fas0_is_1() -> None:
    """The paper defines JSS and RCR on sound traces only (FAS0 = 1); elsewhere they are NULL with
    status 'undefined' and the reason, so a teacher's mean of 'ok' rows is a mean over its FAS0 = 1
    traces."""
    from legival_core.quality.group import QualityUnit, load_computer

    cfg = QualityConfig(z3_workers=1)
    run = load_computer(group_defs(cfg)["z3"], cfg)
    assert callable(run)
    units = [QualityUnit("sound", "gsm8k", "16 - 3 - 4 = 9, then 9 * 2 = 18. She makes $18.", "", "q"),
             QualityUnit("unsound", "gsm8k", "3 * 4 = 12. The answer is 13.", "", "q")]
    got = {(r["trace_id"], r["metric"]): r for r in run(units)}
    assert all(r["code_version"] == "z3-extract-2" for r in got.values())
    # sound: s1 v1=16-3, s2 v2=v1-4, s3 v2==9, s4 v3=v2*2, s5 v3==18, s6 final=v3*1, s7 final==18; the
    # shortcuts s5, s7 go, leaving 5 tracks. {s3, s4, s6} force 18: JSS = 3/5. Dropping s1 or s2 (s3
    # pins v2) or s3 (s1, s2 compute v2) still forces it, s4 or s6 does not: RCR = 3/5.
    assert [(got["sound", m]["value"], got["sound", m]["status"]) for m in ("z3_fas0", "z3_jss", "z3_rcr")] == [
        (1.0, "ok"), (pytest.approx(0.6), "ok"), (pytest.approx(0.6), "ok")]
    # unsound: v1=3*4, v1==12, final==13 (a shortcut: the stated answer). Without it nothing forces 13:
    # FAS0 = 0. The authors' script would store RCR = 0/2 = 0; the paper leaves JSS and RCR undefined.
    assert (got["unsound", "z3_fas0"]["value"], got["unsound", "z3_fas0"]["status"]) == (0.0, "ok")
    assert (got["unsound", "z3_acs"]["value"], got["unsound", "z3_acs"]["status"]) == (1.0, "ok")
    for m in ("z3_jss", "z3_rcr"):
        r = got["unsound", m]
        assert (r["value"], r["status"]) == (None, "undefined")
        assert json.loads(r["detail"]) == {"fas0": 0.0, "reason": "defined only when FAS0 = 1"}
