"""Reports that never go silently blank (issue 13, items 1-5), through the real `legival` entry point.

1. transfer metrics come from the rollouts alone (no efficiency run needed), and a metric whose
   stage has not run is empty AND the report says so (coverage.csv, the terminal line);
2. the three metric CSVs keep one schema whatever stages ran; coverage.csv says why a cell is empty;
3. commands that read a store refuse a missing one; `report` works on a store on read-only media;
4. `legival serve` shows the same dashboard data as `legival report`;
5. the terminal table is compact (`--wide` for every column).
"""

from __future__ import annotations

import csv
import json
import shutil
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest

from tests._cli import Ran
from tests._cli import legival as run_legival
from tests.conftest import EXAMPLES

TRACES = EXAMPLES / "gsm8k_md_eval_cot_5teachers.jsonl"
METRIC_FILES = ("teacher_metrics.csv", "teacher_dataset_metrics.csv", "teacher_dataset_student_metrics.csv")


def legival(*args: str, ok: bool = True) -> Ran:
    r = run_legival(*args)
    assert "Traceback" not in r.stderr, r.stderr[-3000:]
    if ok:
        assert r.returncode == 0, f"legival {args}: {r.stderr[-3000:]}"
    return r


def summary(r: Ran) -> dict[str, object]:
    out: dict[str, object] = json.loads(r.stdout.strip().splitlines()[-1])
    return out


def rows(path: Path) -> list[dict[str, str]]:
    with path.open(encoding="utf-8", newline="") as fh:
        return list(csv.DictReader(fh))


def header(path: Path) -> list[str]:
    with path.open(encoding="utf-8", newline="") as fh:
        return next(csv.reader(fh))


@pytest.fixture(scope="module")
def ingested(tmp_path_factory: pytest.TempPathFactory) -> Path:
    db = tmp_path_factory.mktemp("honest") / "s.duckdb"
    legival("ingest", str(TRACES), "--db", str(db))
    return db


def copy_of(db: Path, tmp_path: Path) -> Path:
    dst = tmp_path / db.name
    shutil.copy(db, dst)
    return dst


def test_transfer_metrics_without_efficiency_and_the_report_says_what_is_missing(ingested: Path, tmp_path: Path) -> None:
    db = copy_of(ingested, tmp_path)
    t = summary(legival("transfer", "--db", str(db), "--backend", "scripted-demo", "--model", "scripted-demo-v1",
                        "--limit", "4", "--max-new-tokens", "48"))
    assert int(t["rollouts_generated"]) > 0  # type: ignore[call-overload]
    out = tmp_path / "r1"
    r = legival("report", "--db", str(db), "--out", str(out), "--resamples", "0")
    td = rows(out / "teacher_dataset_metrics.csv")
    assert td and all(row["fotu"] != "" and row["regression_rate"] != "" for row in td)
    assert all(row["token_len_median"] == "" and row["redundancy"] == "" for row in td)
    cov = rows(out / "coverage.csv")
    eff = [c for c in cov if c["metric"] == "token_len_median"]
    assert eff and all(c["status"] == "not run" and c["detail"] == "legival efficiency --db DB" for c in eff)
    assert all(c["status"] == "computed" and int(c["n"]) > 0 for c in cov if c["metric"] == "fotu")
    assert "not run" in r.stdout and "legival efficiency --db DB" in r.stdout  # the terminal line says so

    legival("efficiency", "--db", str(db))
    out2 = tmp_path / "r2"
    legival("report", "--db", str(db), "--out", str(out2), "--resamples", "0")
    td2 = {row["teacher"]: row for row in rows(out2 / "teacher_dataset_metrics.csv")}
    for row in td:  # transfer numbers unchanged by running efficiency afterwards
        assert td2[row["teacher"]]["fotu"] == row["fotu"] and td2[row["teacher"]]["sotu"] == row["sotu"]
        assert td2[row["teacher"]]["token_len_median"] != ""
    cov2 = rows(out2 / "coverage.csv")
    assert all(c["status"] == "computed" for c in cov2 if c["metric"] == "token_len_median")
    assert {c["status"] for c in cov2 if c["metric"] == "clarity_clx"} == {"not run"}


def test_one_schema_whatever_stages_ran(ingested: Path, tmp_path: Path) -> None:
    db = copy_of(ingested, tmp_path)
    bare = tmp_path / "bare"
    legival("report", "--db", str(db), "--out", str(bare), "--resamples", "0")
    # before any stage: the transfer numbers are "not run" (not "too few traces": without steps the
    # store cannot know the transfer traces), in coverage.csv and in rank_by_student.csv
    for name in ("coverage.csv", "rank_by_student.csv"):
        fotu = [c for c in rows(bare / name) if c["metric"] == "fotu"]
        assert fotu and all(c["status"] == "not run" and "legival transfer --db DB" in c["detail"] for c in fotu), name
    assert header(bare / "diff.csv")[:3] == ["from_run", "to_run", "teacher"] and not rows(bare / "diff.csv")
    legival("efficiency", "--db", str(db))
    legival("transfer", "--db", str(db), "--backend", "scripted-demo", "--model", "scripted-demo-v1", "--limit", "2",
            "--max-new-tokens", "24")
    legival("quality", "--db", str(db), "--metrics", "clarity")
    full = tmp_path / "full"
    legival("report", "--db", str(db), "--out", str(full), "--resamples", "0")
    for name in METRIC_FILES:
        assert header(bare / name) == header(full / name), name
    tm = header(full / "teacher_metrics.csv")
    for col in ("monitor_f1", "rm_skywork-v2-llama-8b", "rm_qwen2.5-math-prm-7b_min", "clarity_clx", "nli_intra",
                "global_index", "z3_extraction_rate"):
        assert col in tm, col
    cov = rows(full / "coverage.csv")
    statuses = {c["metric"]: c["status"] for c in cov}
    assert statuses["clarity_clx"] == "computed" and statuses["rm_skywork-v2-llama-8b"] == "not run"
    assert header(full / "coverage.csv") == ["teacher", "dataset", "metric", "stage", "status", "n", "detail"]


def test_reading_commands_refuse_a_missing_store(tmp_path: Path) -> None:
    typo = tmp_path / "typo.duckdb"
    for args in (("report", "--db", str(typo), "--out", str(tmp_path / "r")), ("efficiency", "--db", str(typo)),
                 ("transfer", "--db", str(typo)), ("grade", "--db", str(typo)), ("quality", "--db", str(typo))):
        r = legival(*args, ok=False)
        assert r.returncode == 2 and "error:" in r.stderr and "no such store" in r.stderr, (args, r.stderr)
    assert not typo.exists() and not (tmp_path / "r").exists()


def test_report_on_read_only_media(ingested: Path, tmp_path: Path) -> None:
    ro = tmp_path / "ro"
    ro.mkdir()
    shutil.copy(ingested, ro / "s.duckdb")
    out = tmp_path / "out"
    cmd = (f"mount --bind -o ro {ro} {ro} && {sys.executable} -m legival report --db {ro / 's.duckdb'} "
           f"--out {out} --resamples 0")
    probe = subprocess.run(["unshare", "-m", "--propagation", "private", "true"], capture_output=True)
    if probe.returncode != 0:
        pytest.skip("needs `unshare -m` (a private mount namespace) to make read-only media")
    r = subprocess.run(["unshare", "-m", "--propagation", "private", "bash", "-c", cmd], capture_output=True,
                       text=True, timeout=600)
    assert r.returncode == 0, r.stderr[-2000:]
    assert (out / "teacher_metrics.csv").is_file()


def test_serve_shows_the_same_dashboard_as_report(ingested: Path, tmp_path: Path) -> None:
    db = copy_of(ingested, tmp_path)
    legival("efficiency", "--db", str(db))
    out = tmp_path / "r"
    legival("report", "--db", str(db), "--out", str(out), "--resamples", "20")
    static = _page_json((out / "index.html").read_text(encoding="utf-8"))
    proc = subprocess.Popen([sys.executable, "-m", "legival", "serve", "--db", str(db), "--port", "0",
                             "--resamples", "20"], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        assert proc.stdout is not None
        url = proc.stdout.readline().strip()
        assert url.startswith("http://127.0.0.1:"), url
        live = _page_json(_get(url))
    finally:
        proc.terminate()
        proc.wait(timeout=30)
    assert live["meta"]["live"] is True and static["meta"]["live"] is False
    for key in ("directions", "ranked", "pareto_axes", "ci_metrics", "context_metrics", "coverage"):
        assert live[key] == static[key], key
    assert [sorted(t) for t in live["teachers"]] == [sorted(t) for t in static["teachers"]]
    assert live["correlations"]["metrics"] == static["correlations"]["metrics"]
    for col in ("global_index", "monitor_f1", "clarity_clx"):  # the columns the old live page lacked
        assert col in live["teachers"][0]


def _get(url: str) -> str:
    deadline = time.time() + 120
    while True:
        try:
            return urllib.request.urlopen(url, timeout=30).read().decode("utf-8")
        except OSError:
            if time.time() > deadline:
                raise
            time.sleep(0.5)


def _page_json(html: str) -> dict:  # type: ignore[type-arg]
    block = html.split('<script type="application/json" id="legival-data">', 1)[1].split("</script>", 1)[0]
    data: dict = json.loads(block)  # type: ignore[type-arg]
    return data


def test_compact_terminal_table_and_wide(ingested: Path, tmp_path: Path) -> None:
    out = tmp_path / "r"
    compact = legival("report", "--db", str(ingested), "--out", str(out), "--resamples", "0").stdout
    lines = compact.strip().splitlines()
    head = next(ln for ln in lines if ln.split()[:2] == ["teacher", "dataset"])
    assert head.split() == ["teacher", "dataset", "n", "acc", "tokens", "steps", "redund", "backtr", "FOTU", "SOTU",
                            "RR", "pareto"]
    body = lines[lines.index(head) + 1 : lines.index(head) + 6]
    assert len(body) == 5 and all(len(ln) < 140 for ln in body)  # one line per teacher, nothing folded
    assert any(ln.startswith("coverage: ") for ln in lines)
    wide = legival("report", "--db", str(ingested), "--out", str(out), "--resamples", "0", "--wide").stdout
    assert "token_len_mean" in wide and "n_rollout_unparsed" in wide
