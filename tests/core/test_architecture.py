"""The structure is a contract, checked on every test run (and by `make check`):

- import-linter's contracts (`.importlinter`): the core imports no orchestration, its layers only
  import downward, no import cycle anywhere in legival_core, only the store imports duckdb;
- no SQL string outside the store package; no module over ~500 lines;
- the registry is the one list: every metric the report writes is registered, with a direction.
"""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

from tests._cli import legival
from tests.conftest import REPO

PRODUCTION = ("legival_core", "legival", "flows", "tasks", "deployments")
MAX_LINES = 500
SQL = re.compile(
    r"\bSELECT\b[^\n]*\bFROM\b|\bINSERT\s+(?:OR\s+\w+\s+)?INTO\b|\bDELETE\s+FROM\b|\bUPDATE\s+\w+\s+SET\b"
    r"|\bCREATE\s+(?:TABLE|VIEW|INDEX)\b|\bDROP\s+TABLE\b|\bCOPY\s*\("
)


def _modules() -> list[Path]:
    return sorted(p for pkg in PRODUCTION for p in (REPO / pkg).rglob("*.py") if "__pycache__" not in p.parts)


def test_import_contracts_hold() -> None:
    exe = Path(sys.executable).with_name("lint-imports")
    if not exe.exists():
        pytest.skip("lint-imports is not installed (pip install -e '.[dev]')")
    r = subprocess.run([str(exe)], cwd=REPO, capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stdout[-4000:] + r.stderr[-2000:]
    assert "0 broken" in r.stdout


def test_no_sql_outside_the_store_package() -> None:
    offenders = []
    for path in _modules():
        rel = path.relative_to(REPO)
        if rel.parts[:2] == ("legival_core", "store"):
            continue
        for n, line in enumerate(path.read_text(encoding="utf-8").splitlines(), start=1):
            if SQL.search(line) or re.search(r"^\s*(?:import duckdb|from duckdb\b)", line):
                offenders.append(f"{rel}:{n}: {line.strip()}")
    assert offenders == []


TRACE_REWRITE = re.compile(r"\b(?:DELETE\s+FROM|UPDATE|TRUNCATE(?:\s+TABLE)?|DROP\s+TABLE(?:\s+IF\s+EXISTS)?)\s+traces\b"
                           r"|\bINSERT\s+OR\s+REPLACE\s+INTO\s+traces\b", re.IGNORECASE)


def test_traces_are_append_only() -> None:
    """`store.planner.traces_missing_steps` answers "none missing" from count(traces) == count(step
    counts): a deleted or replaced trace would let a trace without steps pass unseen."""
    offenders = [f"{p.relative_to(REPO)}:{n}: {line.strip()}" for p in _modules()
                 for n, line in enumerate(p.read_text(encoding="utf-8").splitlines(), start=1)
                 if TRACE_REWRITE.search(line)]
    assert offenders == []
    assert TRACE_REWRITE.search('"DELETE FROM traces WHERE trace_id = ?"')
    assert TRACE_REWRITE.search("update traces set reasoning = ?") and not TRACE_REWRITE.search("DELETE FROM trace_metrics")


def test_the_sql_detector_can_fire() -> None:
    assert SQL.search('"SELECT trace_id FROM traces"') and SQL.search("DELETE FROM trace_metrics")
    assert SQL.search("UPDATE judge_batches SET state = ?") and not SQL.search("select the traces from a file")


def test_no_module_over_the_size_limit() -> None:
    big = [f"{p.relative_to(REPO)}: {n}" for p in _modules()
           if (n := len(p.read_text(encoding="utf-8").splitlines())) > MAX_LINES]
    assert big == []


def test_every_report_metric_is_registered_with_its_meaning() -> None:
    from legival_core.metrics.base import all_metrics
    from legival_core.reports.compute.aggregate import TRANSFER_COLUMNS, teacher_dataset_report_columns

    infos = {m.name: m for m in all_metrics()}
    for m in infos.values():
        assert m.unit and m.section and m.stage and m.description, m.name
        assert m.direction in ("higher", "lower", None)
    # every metric column of teacher_dataset_metrics.csv is a registered metric (counts and keys aside)
    for col in teacher_dataset_report_columns():
        if col in ("teacher", "dataset") or col.startswith("n_") or col.endswith("_method"):
            continue
        assert col in infos, col
    # every registered transfer metric is one the transfer aggregation computes
    assert {m.name for m in all_metrics() if m.source == "transfer"} <= set(TRANSFER_COLUMNS)


def test_list_metrics_shows_every_metric_with_its_direction() -> None:
    from legival_core.metrics.base import all_metrics

    r = legival("list", "metrics")
    assert r.returncode == 0, r.stderr
    lines = {ln.split()[0]: ln for ln in r.stdout.splitlines()[1:-1] if ln.startswith("  ")}
    for m in all_metrics():
        want = {"higher": "higher is better", "lower": "lower is better"}.get(m.direction or "", " - ")
        assert m.name in lines and want.strip() in lines[m.name], m.name


def test_every_registered_entry_has_a_readable_description() -> None:
    """`legival list` shows each entry's description: never a dataclass's generated signature (what an
    instance registered without a description of its own would show) and never empty."""
    import re

    from legival_core.registry import KINDS, entries

    for kind in KINDS:
        for e in entries(kind):  # type: ignore[arg-type]
            assert e.description.strip(), (kind, e.name)
            assert not re.match(r"^\w+\(\w+: '", e.description), (kind, e.name, e.description[:80])
    r = legival("list", "datasets")
    assert r.returncode == 0 and "DatasetSpec(" not in r.stdout and "gsm8k problems" in r.stdout


def _cycle_check(*dirs: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, str(REPO / "scripts" / "import_cycles.py"), *map(str, dirs)],
                          capture_output=True, text=True, timeout=120)


def test_no_import_cycle_counting_every_import() -> None:
    """import-linter skips TYPE_CHECKING imports and the inside of a layer; this check does not."""
    r = _cycle_check(*(REPO / pkg for pkg in ("legival_core", "legival", "tasks", "flows")))
    assert r.returncode == 0, r.stdout + r.stderr
    assert "legival_core:" in r.stdout and "no import cycle" in r.stdout


@pytest.mark.parametrize("closing", [
    "if TYPE_CHECKING:\n    from pkg.a import A\n",
    "def f() -> None:\n    from pkg import a\n",
    "from . import a\n",
    "import pkg.a\n",
])
def test_the_cycle_check_finds_a_circle_however_it_is_closed(tmp_path: Path, closing: str) -> None:
    pkg = tmp_path / "pkg"
    (pkg / "sub").mkdir(parents=True)
    (pkg / "__init__.py").write_text("")
    (pkg / "sub" / "__init__.py").write_text("")
    (pkg / "a.py").write_text("from pkg.sub.b import B\n\n\nclass A:\n    pass\n")
    (pkg / "sub" / "b.py").write_text("from pkg.c import C\n\n\nclass B:\n    pass\n")
    (pkg / "c.py").write_text("from typing import TYPE_CHECKING\n\n" + closing)
    (pkg / "d.py").write_text("from pkg import a\n")  # imports into the cycle, not part of it
    r = _cycle_check(pkg)
    assert r.returncode == 1, r.stdout
    assert "pkg.a, pkg.c, pkg.sub.b" in r.stdout and "pkg.d" not in r.stdout
    (pkg / "c.py").write_text("class C:\n    pass\n")
    assert _cycle_check(pkg).returncode == 0


OPTIONAL_HEAVY = ("z3", "torch", "transformers", "vllm", "onnxruntime", "sentence_transformers", "google.genai",
                  "scipy", "matplotlib")


def test_the_registry_scan_imports_no_heavy_optional_dependency() -> None:
    """Every built-in module is imported by the registry's scan, also in the vLLM worker's own
    environment (no z3, no torch): a registered module imports such a package when it is used."""
    code = ("import sys\n"
            f"for m in {OPTIONAL_HEAVY!r}: sys.modules[m] = None\n"
            "from legival_core.registry import discover, names\n"
            "discover()\n"
            "print(len(names('quality')), len(names('metric')), len(names('stage')))\n")
    r = subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr[-3000:]
    n_quality, n_metric, n_stage = map(int, r.stdout.split())
    assert n_quality >= 11 and n_metric > n_quality and n_stage >= 10
