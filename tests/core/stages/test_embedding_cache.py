"""One embedding cache for every stage that embeds steps with the same model: redundancy (efficiency)
and cohesion (quality, here set to MiniLM) compute each distinct sentence once, whichever runs first;
the cache lives in the store (`sentence_embeddings`), keyed by (model, sentence hash), so cohesion's
default all-mpnet-base-v2 vectors never mix with redundancy's MiniLM ones."""

from __future__ import annotations

import pickle
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import pytest

from legival_core.catalog import MINILM, MPNET
from legival_core.embed import encoded_sentences
from legival_core.run_config import Efficiency
from legival_core.stages.base import Work
from legival_core.stages.efficiency import EfficiencyStage, compute_efficiency
from legival_core.stages.ingest import ingest_file
from legival_core.stages.quality import QualityConfig, compute_quality
from legival_core.store import Store
from tests._sql import rows
from tests.conftest import EXAMPLES

BUNDLED = EXAMPLES / "gsm8k_md_eval_cot_5teachers.jsonl"
MINILM_COHESION = QualityConfig(embed_model=MINILM)


@pytest.fixture
def small(store: Store, tmp_path: Path) -> Store:
    lines = BUNDLED.read_text().splitlines()
    f = tmp_path / "twenty.jsonl"
    f.write_text("\n".join(lines[::4]) + "\n")  # 20 traces, all five teachers
    ingest_file(store, f)
    return store


def _distinct_steps(store: Store) -> int:
    return rows(store, """
        SELECT count(DISTINCT substr(t.reasoning, s.start_char + 1, s.end_char - s.start_char))
        FROM steps s JOIN traces t USING (trace_id) JOIN step_counts c USING (trace_id, segmenter)
        WHERE c.m >= 2""")[0][0]


def test_cohesion_reuses_what_redundancy_embedded(small: Store) -> None:
    s = compute_efficiency(small, Efficiency())
    cached = small.count("sentence_embeddings")
    assert s.encoded_sentences == cached == _distinct_steps(small) > 0
    before = encoded_sentences()
    q = compute_quality(small, ["cohesion"], MINILM_COHESION)
    assert q.computed["cohesion"] == 20
    assert encoded_sentences() == before  # not one sentence through the model again
    assert small.count("sentence_embeddings") == cached
    assert rows(small, "SELECT count(*) FROM trace_metrics WHERE metric = 'cohesion' AND status = 'ok'")[0][0] > 0


def test_redundancy_reuses_what_cohesion_embedded(small: Store) -> None:
    compute_quality(small, ["cohesion"], MINILM_COHESION)
    cached = small.count("sentence_embeddings")
    assert cached == _distinct_steps(small)
    before = encoded_sentences()
    s = compute_efficiency(small, Efficiency())
    assert s.redundancy_rows == 20 and s.encoded_sentences == 0 and s.cached_sentences == cached
    assert encoded_sentences() == before


def test_int8_vectors_are_cached_apart(small: Store) -> None:
    compute_efficiency(small, Efficiency())
    fp32 = small.count("sentence_embeddings")
    s = compute_efficiency(small, Efficiency(embed_precision="int8"))
    assert s.redundancy_rows == 20 and s.encoded_sentences == fp32
    models = dict(rows(small, "SELECT model, count(*) FROM sentence_embeddings GROUP BY model"))
    assert models == {"all-MiniLM-L6-v2": fp32, "all-MiniLM-L6-v2#int8": fp32}
    assert dict(rows(small, "SELECT model, count(DISTINCT trace_id) FROM step_similarity GROUP BY model")) == {
        "all-MiniLM-L6-v2": 20, "all-MiniLM-L6-v2#int8": 20}


def test_mpnet_cohesion_vectors_are_cached_apart_from_minilm(small: Store) -> None:
    compute_efficiency(small, Efficiency())
    minilm = small.count("sentence_embeddings")
    before = encoded_sentences()
    q = compute_quality(small, ["cohesion"])  # the default: all-mpnet-base-v2
    assert q.computed["cohesion"] == 20 and encoded_sentences() - before == minilm  # none taken from MiniLM's
    assert dict(rows(small, "SELECT model, dim FROM sentence_embeddings GROUP BY model, dim")) == {MINILM: 384, MPNET: 768}
    assert dict(rows(small, "SELECT model, count(*) FROM sentence_embeddings GROUP BY model")) == {MINILM: minilm, MPNET: minilm}
    before = encoded_sentences()
    compute_quality(small, ["cohesion"], MINILM_COHESION)  # MiniLM cohesion: redundancy's vectors, new rows
    assert encoded_sentences() == before
    methods = rows(small, "SELECT method, count(*) FROM trace_metrics WHERE metric = 'cohesion' GROUP BY 1 ORDER BY 1")
    assert methods == [(MINILM, 20), (MPNET, 20)]


class PickledExecutor:
    """Ships the work and each chunk through pickle, as the Ray executor does to its actors."""

    def run(self, work: Work[Any, Any, Any], units: Sequence[Any]) -> Iterator[list[Any]]:
        work = pickle.loads(pickle.dumps(work))
        worker = work.setup()
        for i in range(0, len(units), work.chunk_size):
            yield pickle.loads(pickle.dumps(work.process(worker, pickle.loads(pickle.dumps(units[i:i + work.chunk_size])))))


def test_the_stage_runs_on_a_remote_style_executor(small: Store) -> None:
    from legival_core.stages.base import run_stage

    s = run_stage(EfficiencyStage(Efficiency(), chunk=5), small, PickledExecutor())
    assert s.redundancy_rows == 20 and small.count("sentence_embeddings") == s.encoded_sentences > 0
