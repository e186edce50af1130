"""The self-contained dashboard `index.html` (inline CSS/JS, figures as data URIs; no network).

Trace text is untrusted. All data reaches the page as ONE JSON document inside
`<script type="application/json">`, with `<`, `>`, `&`, U+2028 and U+2029 written as \\u escapes so
no `</script>` or `<!--` can end or alter the script element; the page's JavaScript parses it and
inserts every string with `textContent` (never `innerHTML`), so a trace containing `<script>` or
`onerror=` renders as text. `legival serve` uses the same page with `live: true` and answers
`/api/traces` and `/api/trace` from the store, so every trace can be browsed, not only the sample.
The trace view is the step explorer (docs/reports.md): per depth a marker per student (its rollouts'
status, answers and continuations) and the stored step events (`store.step_events.trace_events`), whose
drops are highlighted on the steps that caused them. A continuation is capped at `CONTINUATION_CHARS`
in the static file, whose size grows with every embedded trace; the live API sends it whole.
The page itself (HTML, CSS, JavaScript) is `templates/dashboard.html`; this module fills in the data.
"""

from __future__ import annotations

import base64
import json
import math
from pathlib import Path
from typing import TYPE_CHECKING, Any

from legival_core.datasets.base import grader_key
from legival_core.metrics.backtracking import BACKTRACKING
from legival_core.metrics.base import all_metrics
from legival_core.reports.compute.bootstrap import ci_metrics
from legival_core.reports.compute.coverage import stage_command
from legival_core.reports.compute.data import ReportData
from legival_core.reports.compute.pareto import FRONTIERS
from legival_core.reports.compute.stats import correlation_matrix
from legival_core.reports.render.bundle import Report
from legival_core.reports.render.paper_sections import changes_html, nav_html, sections_html
from legival_core.reports.render.plots import PLOT_FILES, correlation_view, teacher_labels
from legival_core.segment import SEGMENTER_VERSION
from legival_core.store import Store
from legival_core.store import dashboard as reads
from legival_core.store import planner as plan_reads
from legival_core.store import step_events as step_reads
from legival_core.transfer.step_events import step_cues

if TYPE_CHECKING:
    import polars as pl

CONTINUATION_CHARS = 4000
"""A continuation longer than this is cut in the static file (`truncated`), with its full length said."""
MIN_N = 10
"""A value resting on fewer traces than this is flagged on the page (marker and tooltip)."""
TEMPLATE = Path(__file__).with_name("templates") / "dashboard.html"


def safe_json(obj: Any) -> str:
    """JSON that is inert inside an HTML <script> element (NaN/inf become null)."""
    text = json.dumps(_clean(obj), ensure_ascii=False, allow_nan=False, separators=(",", ":"))
    return (text.replace("&", "\\u0026").replace("<", "\\u003c").replace(">", "\\u003e")
            .replace("\u2028", "\\u2028").replace("\u2029", "\\u2029"))


def _clean(obj: Any) -> Any:
    if isinstance(obj, float):
        return None if math.isnan(obj) or math.isinf(obj) else obj
    if isinstance(obj, dict):
        return {str(k): _clean(v) for k, v in obj.items()}
    if isinstance(obj, list | tuple):
        return [_clean(v) for v in obj]
    return obj


def _rows(frame: pl.DataFrame) -> list[dict[str, Any]]:
    return frame.to_dicts()


# --- trace browser data -------------------------------------------------------------------------------


def _graders(store: Store) -> pl.DataFrame:
    """The current grader key of every dataset with traces (a dataset no longer registered has none)."""
    import polars as pl

    pairs = []
    for d in plan_reads.stored_datasets(store):
        try:
            pairs.append((d, grader_key(d)))
        except KeyError:
            continue
    return pl.DataFrame(pairs, orient="row", schema={"dataset": pl.Utf8, "grader": pl.Utf8})


def trace_list(store: Store, teacher: str | None = None, dataset: str | None = None,
               per_cell: int | None = None) -> list[dict[str, Any]]:
    """Traces for the browser: id, teacher, dataset, problem, correct (current grader), number of
    rollouts. With `per_cell`, the first `per_cell` per (teacher, dataset), traces with rollouts first."""
    return _rows(reads.trace_list(store, _graders(store), teacher, dataset, per_cell))


def trace_details(store: Store, trace_ids: list[str], tau: float, model: str,
                  max_chars: int | None = CONTINUATION_CHARS) -> dict[str, dict[str, Any]]:
    """Per trace: question, gold, steps (text, r_i, redundant = r_i > tau, backtracking flag), the
    teacher's answer with its grade by the current grader, the explorer's `markers` (one per student and
    depth, `_markers`) and the stored step `events` of its students. `max_chars` caps each continuation
    (None: whole, as the live API sends one trace at a time)."""
    if not trace_ids:
        return {}
    rows = reads.trace_rows(store, trace_ids, _graders(store), model, SEGMENTER_VERSION, BACKTRACKING.name)
    judge_flags = {tid: _flag_list(f) for tid, f, _m in rows.judge_flags.iter_rows()}
    judge_method = {tid: m for tid, _f, m in rows.judge_flags.iter_rows()}
    lex = {tid: _flag_list(detail) for tid, detail in rows.lexical.iter_rows()}
    by_sim: dict[str, dict[int, float]] = {}
    for tid, idx, r in rows.similarities.iter_rows():
        by_sim.setdefault(tid, {})[int(idx)] = float(r)
    by_steps: dict[str, list[tuple[int, int, int]]] = {}
    for tid, idx, a, b in rows.steps.iter_rows():
        by_steps.setdefault(tid, []).append((int(idx), int(a), int(b)))
    by_roll: dict[str, list[dict[str, Any]]] = {}
    for row in rows.rollouts.iter_rows(named=True):
        tid = row.pop("trace_id")
        for key in ("continuation", "forced_continuation"):
            row[key] = truncated(row[key], max_chars)
        by_roll.setdefault(tid, []).append(row)
    by_event: dict[str, list[dict[str, Any]]] = {}
    for row in step_reads.trace_events(store, trace_ids).drop("student_key", "code_version").iter_rows(named=True):
        by_event.setdefault(row.pop("trace_id"), []).append(row)
    out: dict[str, dict[str, Any]] = {}
    for row in rows.base.iter_rows(named=True):
        tid = row["trace_id"]
        text = row["reasoning"]
        if tid in judge_flags:
            flags, method = set(judge_flags[tid]), judge_method.get(tid, "judge")
        else:
            flags, method = set(lex.get(tid, [])), "lexical" if tid in lex else None
        sim = by_sim.get(tid, {})
        spans = by_steps.get(tid, [])
        answers, checks = step_cues([text[a:b] for _i, a, b in spans], [i for i, _a, _b in spans], row["dataset"],
                                    row["gold"])
        step_list = [
            {"idx": idx, "text": text[a:b], "r": sim.get(idx), "redundant": sim.get(idx, -1.0) > tau,
             "backtracking": idx in flags, "answer": idx in answers, "self_check": idx in checks}
            for idx, a, b in spans
        ]
        events = by_event.get(tid, [])
        out[tid] = {
            "trace_id": tid, "teacher": row["teacher"], "dataset": row["dataset"], "problem_id": row["problem_id"],
            "question": row["question"], "gold": row["gold"], "answer_text": row["answer_text"],
            "grade": {"grader": row["grader"], "extracted": row["extracted"], "correct": row["correct"],
                      "status": row["grade_status"], "command": stage_command("grade")},
            "reasoning": text if not step_list else None, "steps": step_list, "backtracking_method": method,
            "markers": _markers(by_roll.get(tid, []), events), "events": events,
            "events_command": stage_command("step_events"),
        }
    return out


def truncated(text: str | None, max_chars: int | None) -> str | None:
    """`text` cut at `max_chars`, saying so and how long it was (None: whole)."""
    if text is None or max_chars is None or len(text) <= max_chars:
        return text
    return f"{text[:max_chars]}\u2026 (truncated, {len(text)} chars)"


def _markers(rollouts: list[dict[str, Any]], events: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """One marker per (student, depth k) with rollouts, by k then student: its samples (status, correct,
    forced, extracted answer, continuations), `kind` (`overflow` when no sample is `ok`, else `correct`
    when at least half the `ok` samples are correct, `wrong` otherwise), `forced` (an `ok` sample's
    answer was forced), and `drop`: the drop event (k_start, y_start, y_end) that ends at this depth for
    this student, when one is stored; its steps are k_start + 1 .. k; `rise` the same for a rise."""
    moves = {(e["outcome"], e["student"], e["k_end"]): {"k_start": e["k_start"], "y_start": e["y_start"],
                                                         "y_end": e["y_end"]}
             for e in events if e["outcome"] in ("drop", "rise")}
    groups: dict[tuple[int, str], list[dict[str, Any]]] = {}
    for r in rollouts:
        groups.setdefault((int(r["k"]), r["student"]), []).append(
            {key: r[key] for key in ("sample", "status", "correct", "forced", "extracted", "continuation",
                                     "forced_continuation")})
    out = []
    for (k, student), samples in sorted(groups.items(), key=lambda kv: (kv[0][0], kv[0][1])):
        ok = [s for s in samples if s["status"] == "ok"]
        n_correct = sum(bool(s["correct"]) for s in ok)
        kind = "overflow" if not ok else "correct" if 2 * n_correct >= len(ok) else "wrong"
        out.append({"student": student, "k": k, "kind": kind, "forced": any(s["forced"] for s in ok),
                    "n_samples": len(samples), "n_ok": len(ok), "n_correct": n_correct,
                    "drop": moves.get(("drop", student, k)), "rise": moves.get(("rise", student, k)),
                    "samples": samples})
    return out


def _flag_list(raw: str | None) -> list[int]:
    """Step numbers from a stored JSON list, a {"steps": [...]} detail, or "1,3,4"."""
    if not raw:
        return []
    try:
        val = json.loads(raw)
    except ValueError:
        return [int(x) for x in raw.replace(";", ",").split(",") if x.strip().isdigit()]
    if isinstance(val, dict):
        val = val.get("steps", val.get("backtracking_steps", []))
    out = []
    for v in val if isinstance(val, list) else []:
        if isinstance(v, dict):
            v = v.get("step_number")
        if isinstance(v, int | float) and not isinstance(v, bool):
            out.append(int(v))
    return out


# --- the page -----------------------------------------------------------------------------------------


def page_data(data: ReportData, store: Store | None, per_cell: int, live: bool = False,
              images: dict[str, str] | None = None) -> dict[str, Any]:
    # the live page asks /api/traces per (teacher, dataset); the static one embeds a sample
    traces = trace_list(store, per_cell=per_cell) if store is not None and not live else []
    details = {} if live or store is None else trace_details(
        store, [t["trace_id"] for t in traces], data.tau, data.model)
    boot = data.boot
    return {
        "meta": {"tau": data.tau, "model": data.model, "live": live,
                 "n_resamples": boot.n_resamples if boot else 0, "seed": boot.seed if boot else None,
                 "n_traces": data.traces.height, "n_students": data.students.height,
                 "students": data.students["student"].to_list(),
                 "datasets": sorted(data.traces["dataset"].unique().to_list()),
                 "per_cell": per_cell, "min_n": MIN_N},
        "directions": data.directions,
        "ranked": [m for m in data.directions if f"rank_{m}" in data.teacher_metrics.columns],
        "pareto_axes": pareto_axes(data),
        "context_metrics": [{"name": m.name, "description": m.description} for m in all_metrics()
                            if m.direction is None and m.name in ci_metrics() and m.name in data.correlation_metrics],
        "ci_metrics": ci_metrics(),
        "descriptions": {m.name: m.description for m in all_metrics()},
        "teachers": _rows(data.teacher_metrics),
        # what the Pareto plot and the curve toggles draw for a teacher: the figures' short label (a
        # 300-character model id would crowd the plot); tooltips and tables keep the full name
        "labels": teacher_labels(data, data.tu_curves["teacher"].to_list()),
        "teacher_dataset": _rows(data.aggregates.by_dataset),
        "curves": _curves(data),
        "correlations": _correlations(data),
        "rank_pairs": _rows(data.rank_pairs.filter(data.rank_pairs["distinguishable"] == False)),  # noqa: E712
        "coverage": _rows(data.coverage) if data.coverage is not None else [],
        "images": images or {},
        "traces": traces,
        "details": details,
        "step_effects": step_effects_view(data),
    }


def step_effects_view(data: ReportData) -> dict[str, Any]:
    """The step-effects section: every (scope, feature, outcome) row of the effects with its status
    (`not run: legival step-events --db DB` on every row when no event is stored, or when the tables were
    assembled without a store), the students-agree share per scope, and the scopes in their order
    (the teachers of the trace table, then `all`)."""
    steps = data.steps
    if steps is None:
        return {"ran": False, "command": stage_command("step_events"), "scopes": [], "effects": [], "agreement": []}
    effects = _rows(steps.effects)
    scopes = list(dict.fromkeys(r["scope"] for r in effects))
    return {"ran": bool(data.step_events is not None and data.step_events.height), "command": stage_command("step_events"),
            "scopes": scopes, "effects": effects, "agreement": _rows(steps.agreement)}


def _curves(data: ReportData) -> dict[str, dict[str, Any]]:
    """mu_T(b) per teacher with its band, and `n`: the (trace, student) pairs with a curve it rests on
    (the teacher's `n_curve_traces`, summed over datasets)."""
    tm = data.teacher_metrics
    n_pairs = dict(zip(tm["teacher"].to_list(), tm["n_curve_traces"].to_list(), strict=True)) \
        if "n_curve_traces" in tm.columns else {}
    curves: dict[str, dict[str, Any]] = {}
    for row in data.tu_curves.sort("teacher", "bin").iter_rows(named=True):
        c = curves.setdefault(row["teacher"], {"mu": [], "lo": [], "hi": [], "n": n_pairs.get(row["teacher"])})
        c["mu"].append(row["mu"])
        c["lo"].append(row["ci_low"])
        c["hi"].append(row["ci_high"])
    return curves


def _correlations(data: ReportData) -> dict[str, Any]:
    """The Spearman matrix over the metrics with a value (`correlation_view`): rho (null on the diagonal
    of a constant metric), p and n per pair; `default` is what the page shows first (the paper's
    metrics), `constant` and `absent` are named on the page; the partial correlations."""
    view = correlation_view(data)
    metrics = view.metrics
    mat = correlation_matrix(data.correlations, metrics)
    for i, m in enumerate(metrics):
        if m in view.constant:
            mat[i, i] = math.nan
    sp = data.correlations.filter(data.correlations["kind"] == "spearman")
    pn = {(a, b): (p, n) for a, b, p, n in sp.select("metric_a", "metric_b", "p_value", "n").iter_rows()}

    def pair(a: str, b: str, k: int) -> Any:
        hit = pn.get((a, b), pn.get((b, a)))
        return None if hit is None else hit[k]

    partial = data.correlations.filter(data.correlations["kind"] == "partial_spearman")
    return {
        "metrics": metrics, "default": view.default, "constant": view.constant, "absent": view.absent,
        "rho": [[None if math.isnan(v) else float(v) for v in r] for r in mat.tolist()],
        "p": [[pair(a, b, 0) for b in metrics] for a in metrics],
        "n": [[pair(a, b, 1) for b in metrics] for a in metrics],
        "partial": _rows(partial.filter(partial["metric_b"].is_in(metrics))),
    }


def pareto_axes(data: ReportData) -> dict[str, Any]:
    """The Pareto plot's axis choices: every ranked metric, then the other bootstrapped metrics of
    the correlation matrix (e.g. the students' baseline accuracy), all from the registry; the first
    frontier of teacher_metrics.csv is the default pair."""
    tm = data.teacher_metrics.columns
    options = [m for m in data.directions if f"rank_{m}" in tm]
    options += [m for m in ci_metrics() if m in data.correlation_metrics and m not in options and m in tm]
    x, y, _ = FRONTIERS[0]
    return {"options": options, "x": x if x in options else (options[0] if options else ""),
            "y": y if y in options else (options[-1] if options else "")}


def dashboard_html(report: Report, store: Store | None, per_cell: int = 10, live: bool = False,
                   image_dir: Path | None = None) -> str:
    """The whole page as one string. Figures are read from `image_dir` (the report directory) when
    given; `write_report` writes them first."""

    images = {}
    if image_dir is not None:
        for name in PLOT_FILES:
            p = image_dir / name
            if p.exists():
                images[name] = "data:image/png;base64," + base64.b64encode(p.read_bytes()).decode("ascii")
    payload = safe_json(page_data(report.data, store, per_cell, live, images))
    page = TEMPLATE.read_text(encoding="utf-8")
    page = page.replace("<!--PAPER-NAV-->", nav_html(), 1).replace(
        "<!--PAPER-SECTIONS-->", sections_html(report, image_dir), 1).replace("<!--CHANGES-->", changes_html(report), 1)
    return page.replace("/*DATA*/", payload, 1)


__all__ = ["dashboard_html", "page_data", "safe_json", "trace_details", "trace_list"]
