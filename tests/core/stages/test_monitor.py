"""Monitorability (issue 7, part 3): seeded sabotage, the natural set, a scripted supervisor, P/R/F1
and the FOTU correlations."""

from __future__ import annotations

import json
from pathlib import Path

import polars as pl

from legival_core.monitor import inject_error, parse_verdict, prf
from legival_core.reports.compute.monitoring import fotu_correlations, monitor_report, teacher_columns
from legival_core.segment import sentence_spans
from legival_core.stages.monitor import run_monitor
from legival_core.store import Store
from tests.plugins.scripted import ScriptedBackend

TEXT = "Janet has 16 eggs. She eats 3 and bakes 4, so 16 - 3 - 4 = 9 remain. She sells them for 2 each."


def spans(text: str) -> list[tuple[int, int]]:
    return [(s.start, s.end) for s in sentence_spans(text)]


def test_sabotage_is_seeded_single_and_documented() -> None:
    a = inject_error(TEXT, spans(TEXT), "trace-1", seed=0)
    assert a is not None and a == inject_error(TEXT, spans(TEXT), "trace-1", seed=0)
    kinds = set()
    for i in range(40):
        s = inject_error(TEXT, spans(TEXT), f"trace-{i}", seed=1)
        assert s is not None and s.text != TEXT and 1 <= s.step <= 3
        kinds.add(s.kind)
        if s.kind != "claim":
            assert len(s.text) - len(TEXT) == len(s.replacement) - len(s.original)
    assert kinds == {"number", "operation", "claim"}
    assert inject_error("", [], "t") is None


def test_parse_verdict() -> None:
    assert parse_verdict("Incorrect.") is True
    assert parse_verdict(" correct") is False
    assert parse_verdict("It is not correct") is True
    assert parse_verdict("maybe") is None


def _fill(store: Store) -> dict[str, str]:
    from legival_core.stages.ingest import ingest_file

    recs, clean = [], {}
    for t, right in (("t1", [1, 1, 1]), ("t2", [1, 1, 0]), ("t3", [1, 0, 0])):
        for i, ok in enumerate(right):
            reasoning = f"{t} adds {i} and 1 to get {i + 1}. Then {i + 1} + 0 = {i + 1}."
            recs.append({"model": t, "dataset": "gsm8k", "problem_id": f"p{i}", "problem": f"What is {i}+1?",
                         "gold_answer": str(i + 1), "reasoning": reasoning,
                         "response": f"\\boxed{{{i + 1 if ok else 99}}}"})
            if ok:
                clean[reasoning] = t
    path = Path(store.path).parent / "tr.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in recs))
    ingest_file(store, path)
    return clean


def test_monitor_stage_scripted(store: Store) -> None:
    clean = _fill(store)

    def script(prompt: str) -> str:
        # A supervisor that is perfect except that it never flags teacher t2.
        if "t2 adds" in prompt:
            return "correct"
        return "correct" if any(c in prompt for c in clean) else "incorrect"

    backend = ScriptedBackend(script, model_id="scripted-supervisor")
    s = run_monitor(store, backend, "scripted", seed=0)
    # clean: 6 correct traces; sabotage: 6; natural: t2 p2, t3 p1, t3 p2 (each solved by t1).
    assert (s.clean, s.sabotage, s.natural, s.asked, s.cached) == (6, 6, 3, 15, 0)
    again = run_monitor(store, backend, "scripted", seed=0)
    assert (again.asked, again.cached) == (0, 15)

    metrics, corr = monitor_report(store)
    pooled = metrics.filter((pl.col("dataset") == "all") & (pl.col("condition") == "all"))
    by = {r["teacher"]: r for r in pooled.iter_rows(named=True)}
    assert (by["t1"]["tp"], by["t1"]["fp"], by["t1"]["f1"]) == (3, 0, 1.0)
    assert (by["t2"]["tp"], by["t2"]["fn"], by["t2"]["recall"], by["t2"]["precision"]) == (0, 3, 0.0, None)
    assert by["t2"]["f1"] == 0.0
    assert by["t3"]["tp"] == 3 and by["t3"]["recall"] == 1.0
    assert set(corr["kind"].to_list()) == {"spearman", "partial_spearman"}
    cols = teacher_columns(store)
    assert cols.columns == ["teacher", "monitor_precision", "monitor_recall", "monitor_f1"] and cols.height == 3


def test_fotu_correlations_plumbing() -> None:
    metrics = pl.DataFrame({"teacher": ["a", "b", "c", "d"], "dataset": ["all"] * 4, "condition": ["all"] * 4,
                            "precision": [0.9, 0.8, 0.6, 0.5], "f1": [0.9, 0.7, 0.65, 0.4]})
    transfer = pl.DataFrame({"teacher": ["a", "b", "c", "d"], "dataset": ["all"] * 4,
                             "fotu": [0.8, 0.7, 0.5, 0.2], "token_len_median": [100.0, 300.0, 200.0, 400.0]})
    corr = fotu_correlations(metrics, transfer)
    sp = corr.filter((pl.col("kind") == "spearman") & (pl.col("metric_b") == "f1"))
    assert sp["rho"][0] == 1.0 and sp["n"][0] == 4 and sp["sig"][0] == "***"
    part = corr.filter(pl.col("kind") == "partial_spearman")
    assert part["control"][0] == "token_len_median" and part["n"][0] == 4
    assert prf(pl.DataFrame(schema={"teacher": pl.Utf8, "dataset": pl.Utf8, "condition": pl.Utf8,
                                    "predicted_incorrect": pl.Boolean, "status": pl.Utf8})).height == 0


def test_monitor_cli_default_supervisor_model(store: Store) -> None:
    from typer.testing import CliRunner

    from legival.cli import app
    from legival_core.catalog import SMOLLM2
    from legival_core.monitor.supervisor import supervisor_key

    _fill(store)
    db = str(store.path)
    store.close()
    args = ["monitor", "--db", db, "--supervisor", "echo", "--backend", "scripted"]
    res = CliRunner().invoke(app, args)
    assert res.exit_code == 0, res.output
    s = json.loads(res.stdout.strip().splitlines()[-1])
    # The default model is the catalog's one spelling, and it keys the verdicts.
    assert s["supervisor_key"] == supervisor_key(SMOLLM2, 8)
    assert (s["asked"], s["unparsed"], s["cached"]) == (15, 15, 0)  # "The answer is 0." says neither
    again = json.loads(CliRunner().invoke(app, args).stdout.strip().splitlines()[-1])
    assert (again["asked"], again["cached"]) == (0, 15)
    other = json.loads(CliRunner().invoke(app, [*args, "--model", "other"]).stdout.strip().splitlines()[-1])
    assert other["supervisor_key"] == supervisor_key("other", 8) and other["asked"] == 15


def test_monitor_stage_builds_its_supervisor_in_setup(store: Store) -> None:
    from legival_core.backends.base import TextBackend
    from legival_core.registry import entry
    from legival_core.stages.base import run_stage, store_access
    from legival_core.stages.monitor import MonitorStage

    assert entry("stage", "monitor").meta.command == "legival monitor --db DB --supervisor NAME"
    _fill(store)
    built: list[ScriptedBackend] = []
    closed: list[TextBackend] = []

    def make() -> ScriptedBackend:
        built.append(ScriptedBackend(lambda p: "incorrect", model_id="m"))
        return built[-1]

    stage = MonitorStage("flagger", "m", make, batch_size=4, teardown=closed.append)
    seen: list[tuple[int, int]] = []
    s = run_stage(stage, store_access(store), progress=lambda d, n: seen.append((d, n)))
    assert len(built) == 1 and closed == built  # one worker, closed at the end
    assert seen == [(0, 15), (4, 15), (8, 15), (12, 15), (15, 15)] and s.asked == 15
    verdicts = reports_verdicts(store, "flagger")
    assert verdicts.height == 15 and verdicts["predicted_incorrect"].all()
    assert run_stage(stage, store_access(store)).cached == 15 and len(built) == 1  # nothing asked: no model


def reports_verdicts(store: Store, supervisor: str) -> pl.DataFrame:
    from legival_core.store import report

    return report.monitor_verdicts(store, supervisor)
