"""Reward-model scoring (issue 7, part 2) with tiny randomly initialised models built here (no
download): shapes, batching invariance, truncation, PRM step scores, storage, 'unavailable' rows
and the correlation plumbing."""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pytest

from legival_core.rewards import RewardModelSpec, Score, TraceInput, load_reward_model
from legival_core.stages.rewards import run_rewards
from legival_core.store import Store
from tests._sql import sql


def _tokenizer() -> Any:
    from transformers import AutoTokenizer

    from legival_core.backends.smollm2 import smollm2_safetensors_dir

    return AutoTokenizer.from_pretrained(smollm2_safetensors_dir())


@pytest.fixture(scope="module")
def tiny_rm(tmp_path_factory: pytest.TempPathFactory) -> Path:
    import torch
    from transformers import LlamaConfig, LlamaForSequenceClassification

    tok = _tokenizer()
    torch.manual_seed(0)
    cfg = LlamaConfig(vocab_size=len(tok), hidden_size=16, intermediate_size=32, num_hidden_layers=1,
                      num_attention_heads=2, num_key_value_heads=1, num_labels=1,
                      max_position_embeddings=512, pad_token_id=tok.eos_token_id)  # type: ignore[call-arg]
    out = tmp_path_factory.mktemp("rm")
    LlamaForSequenceClassification(cfg).save_pretrained(out)
    tok.save_pretrained(out)
    return out


@pytest.fixture(scope="module")
def tiny_prm(tmp_path_factory: pytest.TempPathFactory) -> Path:
    import torch
    from transformers import LlamaConfig, LlamaForTokenClassification

    tok = _tokenizer()
    tok.add_special_tokens({"additional_special_tokens": ["<extra_0>"]})
    torch.manual_seed(0)
    cfg = LlamaConfig(vocab_size=len(tok), hidden_size=16, intermediate_size=32, num_hidden_layers=1,
                      num_attention_heads=2, num_key_value_heads=1, num_labels=2,
                      max_position_embeddings=512, pad_token_id=tok.eos_token_id)  # type: ignore[call-arg]
    out = tmp_path_factory.mktemp("prm")
    LlamaForTokenClassification(cfg).save_pretrained(out)
    tok.save_pretrained(out)
    return out


TRACES = [
    TraceInput("a", "What is 2+3?", "2 plus 3 is 5.\n\nCheck: 5 - 3 = 2.", "\\boxed{5}"),
    TraceInput("b", "What is 4*4?", "Four times four is sixteen.", "\\boxed{16}"),
    TraceInput("c", "What is 10-7?", "Ten minus seven. " * 40, "\\boxed{3}"),
]


def test_scalar_rm_batching_and_truncation(tiny_rm: Path) -> None:
    spec = RewardModelSpec("tiny", "tiny", path=str(tiny_rm), dtype="float32", max_length=128, batch_size=3)
    batched = load_reward_model(spec).score(TRACES)
    single = load_reward_model(RewardModelSpec("tiny", "tiny", path=str(tiny_rm), dtype="float32",
                                               max_length=128, batch_size=1)).score(TRACES)
    assert [s.trace_id for s in batched] == ["a", "b", "c"]
    for b, s in zip(batched, single, strict=True):
        assert b.value == pytest.approx(s.value, abs=1e-5)
    assert [s.truncated for s in batched] == [False, False, True]
    assert batched[2].n_tokens <= 128 and batched[2].dropped_tokens > 0


def test_prm_step_scores(tiny_prm: Path) -> None:
    spec = RewardModelSpec("tinyprm", "tinyprm", kind="prm", path=str(tiny_prm), dtype="float32",
                           max_length=256, batch_size=2)
    scores = load_reward_model(spec).score(TRACES[:2])
    assert len(scores[0].step_scores) == 2 and len(scores[1].step_scores) == 1  # "\n\n" paragraphs
    assert all(0.0 < p < 1.0 for s in scores for p in s.step_scores)
    s = scores[0]
    assert (s.aggregate("min"), s.aggregate("last")) == (min(s.step_scores), s.step_scores[-1])


def _fill(store: Store) -> None:
    """Three teachers x three gsm8k problems (no rollouts: FOTU rows are simply absent)."""
    from legival_core.stages.ingest import ingest_file

    recs = []
    for t, right in (("t1", [1, 1, 1]), ("t2", [1, 1, 0]), ("t3", [1, 0, 0])):
        for i, ok in enumerate(right):
            recs.append({"model": t, "dataset": "gsm8k", "problem_id": f"p{i}", "problem": f"What is {i}+1?",
                         "gold_answer": str(i + 1), "reasoning": f"{t} adds {i} and 1. " * (1 + i),
                         "response": f"\\boxed{{{i + 1 if ok else 99}}}"})
    path = Path(store.path).parent / "tr.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in recs))
    ingest_file(store, path)


def test_stage_rows_unavailable_then_scored_and_correlations(store: Store, tiny_rm: Path) -> None:
    from legival_core.reports.compute.rm_scores import teacher_columns
    from legival_core.reports.paper.rewards import rm_correlations

    _fill(store)
    missing = RewardModelSpec("tiny", "tiny", path=str(Path(store.path).parent / "nope"), dtype="float32")
    s = run_rewards(store, [missing])
    assert s.as_dict()["rm_unavailable"] == ["tiny"]
    rows = sql(store, "SELECT status, value FROM trace_metrics WHERE metric = 'rm:tiny'")
    assert rows.height == 9 and set(rows["status"].to_list()) == {"unavailable"}

    s = run_rewards(store, [RewardModelSpec("tiny", "tiny", path=str(tiny_rm), dtype="float32")])
    assert s.models[0].scored == 9  # the local path is not a parameter: real scores replace the rows
    rows = sql(store, "SELECT status FROM trace_metrics WHERE metric = 'rm:tiny'")
    assert set(rows["status"].to_list()) == {"ok"} and rows.height == 9
    assert run_rewards(store, [RewardModelSpec("tiny", "tiny", path=str(tiny_rm))]).models[0].scored == 0

    cols = teacher_columns(store)
    # every registered RM column is there (empty: not run here), then the RM that was run
    from legival_core.metrics.base import metrics_from
    from legival_core.rewards.models import DEFAULT_MODELS

    registered = [m.name for m in metrics_from("rewards") if not m.family]
    assert sorted(registered) == sorted(c for spec in DEFAULT_MODELS for c in spec.columns())
    assert cols.columns == ["teacher", *registered, "rm_tiny"] and cols.height == 3
    assert all(cols[c].null_count() == 3 for c in registered)
    corr = rm_correlations(store, n_boot=50)
    acc = corr.filter((corr["level"] == "model") & (corr["metric"] == "accuracy") & (corr["subset"] == "all"))
    assert acc.height == 1 and acc["n"][0] == 3 and acc["spearman"][0] is not None
    tr = corr.filter((corr["level"] == "trace") & (corr["metric"] == "correct") & (corr["subset"] == "all"))
    assert tr["n"][0] == 9 and tr["pearson_lo"][0] <= tr["pearson"][0] <= tr["pearson_hi"][0]
    assert set(corr["subset"].to_list()) == {"all", "correct", "all_solved"}


def test_rm_cli(store: Store, tiny_rm: Path, tmp_path: Path) -> None:
    from typer.testing import CliRunner

    from legival.cli import app

    _fill(store)
    db = store.path
    store.close()
    res = CliRunner().invoke(app, ["rm", "--db", str(db), "--model", str(tiny_rm), "--dtype", "float32",
                                   "--max-length", "64", "--n-boot", "20", "--out", str(tmp_path / "out")])
    assert res.exit_code == 0, res.output
    summary = json.loads(res.stdout.strip().splitlines()[-1])
    assert summary["rm_scored"] == 9 and summary["rm_truncated"] > 0
    assert (tmp_path / "out" / "rm_correlations.csv").exists()


class _FakeModel:
    """Scores a trace by its reasoning length; records what it was asked and whether it was closed."""

    def __init__(self) -> None:
        self.calls: list[int] = []
        self.closed = False

    def score(self, traces: Sequence[TraceInput]) -> list[Score]:
        self.calls.append(len(traces))
        return [Score(t.trace_id, float(len(t.reasoning)), 10, False, 0) for t in traces]

    def close(self) -> None:
        self.closed = True


def test_stage_chunks_commits_and_closes_the_model(store: Store) -> None:
    from legival_core.registry import entry
    from legival_core.rewards import RewardModelUnavailable
    from legival_core.stages.base import store_access

    assert entry("stage", "rewards").meta.command == "legival rm --db DB"
    _fill(store)
    spec = RewardModelSpec("fake", "fake")

    def missing(_spec: RewardModelSpec) -> _FakeModel:
        raise RewardModelUnavailable("not here")

    s = run_rewards(store, [spec], chunk=4, loader=missing)
    assert s.models[0].status == "unavailable" and s.models[0].reason == "not here"
    assert sql(store, "SELECT count(*) AS n FROM trace_metrics WHERE status = 'unavailable'")["n"][0] == 9

    model = _FakeModel()
    seen: list[tuple[str, int, int]] = []
    s = run_rewards(store_access(store), [spec], limit=7, chunk=3, loader=lambda _s: model,
                    progress=lambda name, d, n: seen.append((name, d, n)))
    assert model.calls == [3, 3, 1] and model.closed
    assert seen == [("fake", 3, 7), ("fake", 6, 7), ("fake", 7, 7)] and s.models[0].scored == 7
    got = sql(store, "SELECT status, count(*) AS n FROM trace_metrics WHERE metric = 'rm:fake' GROUP BY 1 ORDER BY 1")
    assert got.rows() == [("ok", 7), ("unavailable", 2)]  # scores replaced the placeholders of their traces
    values = sql(store, "SELECT x.value, length(t.reasoning) AS n FROM trace_metrics x JOIN traces t USING (trace_id) "
                        "WHERE x.status = 'ok'")
    assert values["value"].to_list() == [float(n) for n in values["n"].to_list()]
