"""The extension points, proven by adding things the way AGENTS.md says: ONE new module, no other file
edited. A new efficiency metric reaches teacher_dataset_metrics.csv, the ranks, the dashboard's
Pareto pickers and the correlation matrix; a new student backend is usable by `legival transfer
--backend NAME`; a new stage is planned by `legival plan` and run by `legival run` after what it
needs; a plugin module outside the package is found through LEGIVAL_PLUGINS.

The modules are written into a copy of the packages in a temporary directory put first on PYTHONPATH
(so the repository is never edited and tests may run in parallel); everything runs through the real
`legival` entry point, in a new process that imports the copy.
"""

from __future__ import annotations

import csv
import json
import os
import re
import shutil
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests._cli import entry_point
from tests.conftest import REPO
from tests.core.reports.test_demo_snapshot import load_demo_store

METRIC_MODULE = '''"""Characters of the reasoning: a metric added by a test (tests/core/test_extension_points.py)."""

from legival_core.metrics.base import MetricValue, TraceMetric, metric


def compute(traces, _cfg):
    return [MetricValue(float(len(t.reasoning)), "chars") for t in traces]


CHAR_LEN = TraceMetric("char_len", "1", lambda _cfg: {}, compute)

metric("char_len_mean", unit="characters", direction="lower", section="test", stage="efficiency",
       stored=CHAR_LEN, order=135, description="mean characters of the reasoning (test metric)")
'''

BACKEND_MODULE = '''"""A tiny deterministic student backend added by a test (tests/core/test_extension_points.py)."""

from legival_core.backends.base import BackendInfo, Completion
from legival_core.registry import register
from tests.conftest import REPO


class EchoBackend:
    """Answers every prompt with the same boxed number; counts whitespace tokens; no prefix cache."""

    def __init__(self, model, answer="18"):
        self.model_id, self.context_length, self.answer = model, 100_000, answer

    def render_chat(self, messages, continue_final_message):
        text = "".join(f"<{m.role}>{m.content}\\n" for m in messages)
        return text[:-1] if continue_final_message else text

    def count_tokens(self, text):
        return len(text.split())

    def generate(self, requests):
        out = []
        for r in requests:
            text = f"So the answer is \\\\boxed{{{self.answer}}}"
            out.append(Completion(r.request_id, text, self.count_tokens(r.prompt), 6, "stop",
                                  self.count_tokens(r.prompt), 0))
        return out

    def close(self):
        return None


@register("backend", "echo-test", meta=BackendInfo(dtypes=("float32",)))
def make_echo(model=None, dtype=None, **options):
    """A test student that always answers the same number."""
    return EchoBackend(model or "echo", **options)
'''


STAGE_MODULE = '''"""Characters of each trace's reasoning as a trace metric: a stage added by a test
(tests/core/test_extension_points.py)."""

from dataclasses import dataclass

from legival_core.stages.base import Plan, Work
from legival_core.stages.registered import register_stage, stage_jobs
from legival_core.store import planner as reads
from legival_core.store import writes


@dataclass
class CharSummary:
    counted: int = 0

    def as_dict(self):
        return {"counted": self.counted}


def no_worker():
    return None


def count(_worker, units):
    return [{"trace_id": tid, "metric": "char_count", "params": "{}", "code_version": "1", "value": float(len(text)),
             "method": "chars", "status": "ok", "detail": None} for tid, text in units]


@dataclass(frozen=True)
class CharStage:
    name: str = "char-count"

    def plan(self, store):
        todo = reads.traces_missing_metric(store, "char_count", "{}", "1")
        units = list(zip(todo["trace_id"].to_list(), todo["reasoning"].to_list()))
        return Plan(units, CharSummary(), total=len(units))

    def run(self, units, executor):
        return executor.run(Work(no_worker, count, 3), units)

    def commit(self, store, results, plan):
        writes.add(store, "trace_metrics", list(results))
        plan.summary.counted += len(results)
        return len(results)


register_stage("char-count", "legival run SPEC", needs=("ingest", "generate"),
               build=lambda ctx: [stage_jobs("char-count", "char-count", [CharStage()])],
               summarize=lambda results: {"char_count": sum(r.counted for r in results)},
               description="characters of every trace (test stage)")
'''


def _legival(*args: str, env: dict[str, str] | None = None, cwd: Path | None = None) -> dict[str, object]:
    r = entry_point(*args, env=env, cwd=cwd)
    assert r.returncode == 0, f"legival {args}: {r.stderr[-3000:]}"
    assert "Traceback" not in r.stderr
    summary: dict[str, object] = r.summary()
    summary["_stdout"] = r.stdout
    return summary


@dataclass(frozen=True)
class PackageCopy:
    """The project's packages copied under `root`, and the environment whose interpreters import them."""

    root: Path
    env: dict[str, str]


@pytest.fixture
def package_copy(tmp_path: Path) -> PackageCopy:
    """`legival` and `legival_core` copied (bytecode included, mtimes kept, so nothing recompiles) into a
    temporary directory that comes first on PYTHONPATH: a test drops its module into the copy exactly
    where a contributor would drop it into the repository. Commands run with the copy as working
    directory (`python -m` puts the working directory before PYTHONPATH)."""
    root = tmp_path / "site"
    for package in ("legival", "legival_core"):
        shutil.copytree(REPO / package, root / package)
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(root), os.environ.get("PYTHONPATH", "")])}
    return PackageCopy(root, env)


@pytest.fixture
def demo_db(tmp_path: Path) -> Path:
    db = tmp_path / "demo.duckdb"
    load_demo_store(db)
    return db


@pytest.mark.slow
def test_new_efficiency_metric_is_one_module(package_copy: PackageCopy, demo_db: Path, tmp_path: Path) -> None:
    (package_copy.root / "legival_core" / "metrics" / "zz_test_char_len.py").write_text(METRIC_MODULE, encoding="utf-8")
    env = package_copy.env

    listed = _legival("list", "metrics", env=env, cwd=package_copy.root)
    assert re.search(r"char_len_mean\s+characters\s+lower is better", str(listed["_stdout"]))
    eff = _legival("efficiency", "--db", str(demo_db), env=env, cwd=package_copy.root)
    assert eff["length_rows"] == 80 and eff["embedded_traces"] == 0  # only the new metric was missing
    out = tmp_path / "report"
    _legival("report", "--db", str(demo_db), "--out", str(out), "--resamples", "20", env=env, cwd=package_copy.root)

    # teacher_dataset_metrics.csv: the mean characters of each teacher's complete traces
    texts: dict[str, list[int]] = {}
    import polars as pl

    traces = pl.read_parquet(REPO / "tests" / "fixtures" / "demo_store" / "traces.parquet")
    for t, reasoning, truncated in traces.select("teacher", "reasoning", "truncated").iter_rows():
        if not truncated:
            texts.setdefault(t, []).append(len(reasoning))
    rows = list(csv.DictReader((out / "teacher_dataset_metrics.csv").open(encoding="utf-8")))
    assert rows and all("char_len_mean" in r for r in rows)
    for r in rows:
        assert float(r["char_len_mean"]) == pytest.approx(sum(texts[r["teacher"]]) / len(texts[r["teacher"]]))
    # ranked (lower is better), with a bootstrap interval, in the correlation matrix
    tm = {r["teacher"]: r for r in csv.DictReader((out / "teacher_metrics.csv").open(encoding="utf-8"))}
    by_len = sorted(tm, key=lambda t: float(tm[t]["char_len_mean"]))
    assert [int(tm[t]["rank_char_len_mean"]) for t in by_len] == [1, 2, 3, 4, 5]
    assert all(tm[t]["char_len_mean_ci_low"] != "" for t in tm)
    corr = list(csv.DictReader((out / "correlations.csv").open(encoding="utf-8")))
    assert any("char_len_mean" in (c["metric_a"], c["metric_b"]) and c["rho"] != "" for c in corr)
    # the dashboard: a Pareto axis choice and a row/column of the correlation matrix
    html = (out / "index.html").read_text(encoding="utf-8")
    data = json.loads(html.split('<script type="application/json" id="legival-data">', 1)[1].split("</script>", 1)[0])
    assert "char_len_mean" in data["pareto_axes"]["options"]
    assert "char_len_mean" in data["correlations"]["metrics"]
    assert data["directions"]["char_len_mean"] == "lower"


@pytest.mark.slow
def test_new_student_backend_is_one_module(package_copy: PackageCopy, demo_db: Path) -> None:
    (package_copy.root / "legival_core" / "backends" / "zz_test_echo.py").write_text(BACKEND_MODULE, encoding="utf-8")
    env = package_copy.env

    listed = _legival("list", "backends", env=env, cwd=package_copy.root)
    assert "echo-test" in listed["backends"]  # type: ignore[operator]
    s = _legival("transfer", "--db", str(demo_db), "--backend", "echo-test", "--model", "echo-1",
                 "--student", "echo", "--limit", "1", env=env, cwd=package_copy.root)
    assert s["rollouts_generated"] == s["rollouts_total"] and int(s["rollouts_total"]) > 0  # type: ignore[arg-type]
    assert s["forced"] == 0  # every continuation had an answer
    again = _legival("transfer", "--db", str(demo_db), "--backend", "echo-test", "--model", "echo-1",
                     "--student", "echo", "--limit", "1", env=env, cwd=package_copy.root)
    assert again["rollouts_generated"] == 0 and again["rollouts_cached"] == s["rollouts_total"]


def test_plugin_module_outside_the_package(tmp_path: Path) -> None:
    (tmp_path / "my_legival_plugin.py").write_text(BACKEND_MODULE, encoding="utf-8")
    env = {**os.environ, "LEGIVAL_PLUGINS": f"{os.environ.get('LEGIVAL_PLUGINS', '')},my_legival_plugin",
           "PYTHONPATH": f"{tmp_path}{os.pathsep}{os.environ.get('PYTHONPATH', '')}"}
    listed = _legival("list", "backends", env=env)
    assert "echo-test" in listed["backends"]  # type: ignore[operator]
    bad = entry_point("list", "backends", env={**env, "LEGIVAL_PLUGINS": "no_such_plugin_module"})
    assert bad.returncode == 2 and "error:" in bad.stderr and "no_such_plugin_module" in bad.stderr
    assert "Traceback" not in bad.stderr


QUALITY_MODULE = '''"""Words of the reasoning: a quality metric added by a test (tests/core/test_extension_points.py)."""

from legival_core.quality.group import QualityGroup, QualityMetric, register_quality_group, row


def load(g, cfg):
    def run(units):
        return [row(u.trace_id, "word_count", g, float(len(u.reasoning.split()))) for u in units]

    return run


register_quality_group(QualityGroup(
    "word_count", (QualityMetric("word_count", "words", "lower", "words of the reasoning (test)", "clarity"),),
    "1", lambda cfg: ({"split": "whitespace"}, "str.split"), load, order=40, datasets=("gsm8k",),
    description="words of the reasoning (test quality metric)"))
'''


@pytest.mark.slow
def test_new_quality_metric_is_one_module(package_copy: PackageCopy, demo_db: Path, tmp_path: Path) -> None:
    (package_copy.root / "legival_core" / "quality" / "groups" / "zz_test_words.py").write_text(
        QUALITY_MODULE, encoding="utf-8")
    env = package_copy.env
    listed = _legival("list", "quality", env=env, cwd=package_copy.root)
    assert "word_count" in listed["quality_groups"]  # type: ignore[operator]
    assert re.search(r"word_count\s+words\s+lower is better", str(_legival("list", "metrics", env=env,
                                                                            cwd=package_copy.root)["_stdout"]))
    q = _legival("quality", "--db", str(demo_db), "--metrics", "word_count", env=env, cwd=package_copy.root)
    assert q["computed"] == {"word_count": 80}  # the datasets it declares: every demo trace is GSM8K
    out = tmp_path / "report"
    _legival("report", "--db", str(demo_db), "--out", str(out), "--resamples", "20", env=env, cwd=package_copy.root)

    import polars as pl

    traces = pl.read_parquet(REPO / "tests" / "fixtures" / "demo_store" / "traces.parquet")
    words: dict[str, list[int]] = {}
    for t, reasoning in traces.select("teacher", "reasoning").iter_rows():
        words.setdefault(t, []).append(len(reasoning.split()))
    tm = {r["teacher"]: r for r in csv.DictReader((out / "teacher_metrics.csv").open(encoding="utf-8"))}
    assert set(tm) == set(words)
    for t, ws in words.items():
        assert float(tm[t]["word_count"]) == pytest.approx(sum(ws) / len(ws))
    # a member of the clarity dimension (lower is better: the fewest words normalise to 1), whose
    # score is the mean of the members present
    best = min(tm, key=lambda t: float(tm[t]["word_count"]))
    assert float(tm[best]["word_count_norm"]) == pytest.approx(1.0)
    for t in tm:
        members = [float(tm[t][c]) for c in ("clarity_clx_norm", "word_count_norm") if tm[t][c] != ""]
        assert float(tm[t]["dim_clarity"]) == pytest.approx(sum(members) / len(members))
    corr = list(csv.DictReader((out / "correlations.csv").open(encoding="utf-8")))
    assert any("word_count" in (c["metric_a"], c["metric_b"]) and c["rho"] != "" for c in corr)
    html = (out / "index.html").read_text(encoding="utf-8")
    data = json.loads(html.split('<script type="application/json" id="legival-data">', 1)[1].split("</script>", 1)[0])
    # the correlation matrix's picker, the teacher table and the tooltips; not a Pareto axis (those are
    # the ranked and bootstrapped metrics, and a text-quality score is descriptive: docs/quality.md)
    assert "word_count" in data["correlations"]["metrics"] and "dim_clarity" in data["correlations"]["metrics"]
    assert all("word_count" in row for row in data["teachers"])
    assert data["descriptions"]["word_count"] == "words of the reasoning (test)"
    assert "word_count" not in data["pareto_axes"]["options"]
    traces_out = pl.read_parquet(out / "traces.parquet")
    assert "word_count" in traces_out.columns and traces_out["word_count"].null_count() == 0


@pytest.mark.slow
def test_new_stage_is_one_module(package_copy: PackageCopy, tmp_path: Path, prefect_api: str) -> None:
    """Planned by `legival plan` (its units), run by `legival run` once what it needs is stored, in
    the run's summary and laps, cached on the rerun; listed by `legival list stages`."""
    from tests.flows._orchestration import write_spec

    (package_copy.root / "legival_core" / "stages" / "zz_test_chars.py").write_text(STAGE_MODULE, encoding="utf-8")
    home = tmp_path / "prefect-home"
    env = {**package_copy.env, "PREFECT_HOME": str(home), "PREFECT_API_URL": prefect_api,
           "PREFECT_SERVER_ANALYTICS_ENABLED": "false", "HF_HUB_OFFLINE": "1"}
    spec = write_spec(tmp_path, ["gpt-oss-20b", "qwen3-4b"], transfer={"enabled": False})
    db = tmp_path / "store.duckdb"
    assert "char-count" in str(_legival("list", "stages", env=env, cwd=package_copy.root)["_stdout"])

    planned = _legival("plan", str(spec), "--db", str(db), env=env, cwd=package_copy.root)
    assert "char-count: 8 to compute, 0 stored" in str(planned["_stdout"])
    assert planned["plan"]["stages"] == {"grade": {"units": 0, "stored": 0}, "char-count": {"units": 8, "stored": 0},
                                         "report": {"units": 1, "stored": 0}}  # type: ignore[index]
    assert not db.exists()  # a plan writes nothing

    first = _legival("run", str(spec), "--db", str(db), env=env, cwd=package_copy.root)
    assert first["char_count"] == 8 and first["new_traces"] == 8
    assert {"ingest", "char-count", "report"} <= set(first["stage_s"])  # type: ignore[call-overload]

    import duckdb

    with duckdb.connect(str(db), read_only=True) as con:
        rows = dict(con.execute("SELECT t.trace_id, m.value FROM traces t JOIN trace_metrics m USING (trace_id) "
                                "WHERE m.metric = 'char_count'").fetchall())
        lengths = dict(con.execute("SELECT trace_id, length(reasoning) FROM traces").fetchall())
    assert rows == {t: float(n) for t, n in lengths.items()}

    again = _legival("plan", str(spec), "--db", str(db), env=env, cwd=package_copy.root)
    assert again["plan"]["stages"]["char-count"] == {"units": 0, "stored": 0}  # type: ignore[index]
    assert _legival("run", str(spec), "--db", str(db), env=env, cwd=package_copy.root)["char_count"] == 0
