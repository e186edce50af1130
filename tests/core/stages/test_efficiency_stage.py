from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from legival_core.embed import embed
from legival_core.metrics.backtracking import lexical_backtracking
from legival_core.metrics.redundancy import max_prev_similarity, redundancy
from legival_core.reports.compute.trace_table import teacher_dataset_metrics, trace_table
from legival_core.run_config import Efficiency
from legival_core.segment import segment
from legival_core.stages.efficiency import compute_efficiency
from legival_core.stages.ingest import ingest_file
from legival_core.store import Store
from legival_core.token_count import token_len
from tests._sql import rows
from tests.conftest import EXAMPLES

EFF = Efficiency()


@pytest.fixture(scope="module")
def ingested_db(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("eff") / "ingested.duckdb"
    with Store(path) as s:
        ingest_file(s, EXAMPLES / "gsm8k_md_eval_cot_5teachers.jsonl")
    return path


@pytest.fixture(scope="module")
def computed_db(ingested_db: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("eff") / "computed.duckdb"
    shutil.copy(ingested_db, path)
    with Store(path) as s:
        compute_efficiency(s, EFF)
    return path


def _copy(src: Path, tmp_path: Path) -> Store:
    dst = tmp_path / "copy.duckdb"
    shutil.copy(src, dst)
    return Store(dst)


@pytest.fixture
def loaded(ingested_db: Path, tmp_path: Path):  # type: ignore[no-untyped-def]
    s = _copy(ingested_db, tmp_path)
    yield s
    s.close()


@pytest.fixture
def computed(computed_db: Path, tmp_path: Path):  # type: ignore[no-untyped-def]
    s = _copy(computed_db, tmp_path)
    yield s
    s.close()


def test_computes_everything_once_then_nothing(loaded: Store) -> None:
    s1 = compute_efficiency(loaded, EFF)
    assert s1.segmented == 80 and s1.length_rows == 240 and s1.redundancy_rows == 80
    assert s1.embedded_traces > 70
    s2 = compute_efficiency(loaded, EFF)
    assert (s2.segmented, s2.length_rows, s2.embedded_traces, s2.redundancy_rows) == (0, 0, 0, 0)


def test_new_threshold_reuses_stored_similarities(computed: Store) -> None:
    s = compute_efficiency(computed, Efficiency(tau=0.5))
    assert s.embedded_traces == 0 and s.redundancy_rows == 80


def test_stored_values_equal_the_pure_functions(computed: Store) -> None:
    loaded = computed
    t = trace_table(loaded, EFF)
    row = t.filter(t["step_len"] > 5).row(0, named=True)
    text = rows(loaded, "SELECT reasoning FROM traces WHERE trace_id = ?", [row["trace_id"]])[0][0]
    steps = segment(text)
    assert row["token_len"] == token_len(text)
    assert row["step_len"] == steps.m
    assert row["backtracking"] == pytest.approx(lexical_backtracking(steps))
    assert row["redundancy"] == pytest.approx(redundancy(max_prev_similarity(embed(steps.sentences(), EFF.model)), 0.8))


def test_teacher_dataset_table(computed: Store) -> None:
    td = teacher_dataset_metrics(trace_table(computed, EFF))
    assert td.height == 5
    assert set(td["n_traces"].to_list()) == {16}
    for col in ("accuracy", "token_len_median", "step_len_median", "redundancy", "backtracking"):
        assert td[col].null_count() == 0, col
    assert td["accuracy"].max() > 0.5
    assert set(td["backtracking_method"].to_list()) == {"lexical"}
