"""The self-contained dashboard `index.html` (inline CSS/JS, figures as data URIs; no network).

Trace text is untrusted. All data reaches the page as ONE JSON document inside
`<script type="application/json">`, with `<`, `>`, `&`, U+2028 and U+2029 written as \\u escapes so
no `</script>` or `<!--` can end or alter the script element; the page's JavaScript parses it and
inserts every string with `textContent` (never `innerHTML`), so a trace containing `<script>` or
`onerror=` renders as text. `legival serve` uses the same page with `live: true` and answers
`/api/traces` and `/api/trace` from the store, so every trace can be browsed, not only the sample.
"""

from __future__ import annotations

import base64
import json
import math
from pathlib import Path
from typing import TYPE_CHECKING, Any

from legival_core.reports.aggregate import CI_METRICS, RANKED_METRICS
from legival_core.segment import SEGMENTER_VERSION

if TYPE_CHECKING:
    import polars as pl

    from legival_core.reports.build import ReportData
    from legival_core.store import Store

CONTINUATION_CHARS = 1500


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


def trace_list(store: Store, teacher: str | None = None, dataset: str | None = None,
               per_cell: int | None = None) -> list[dict[str, Any]]:
    """Traces for the browser: id, teacher, dataset, problem, correct, number of rollouts. With
    `per_cell`, the first `per_cell` per (teacher, dataset), traces with rollouts first (stable order)."""
    rows = store.query(
        """
        WITH r AS (SELECT trace_id, count(*) AS n_rollouts FROM rollouts GROUP BY trace_id),
        g AS (SELECT trace_id, bool_or(correct) AS correct FROM grades GROUP BY trace_id),
        t AS (
            SELECT t.trace_id, t.teacher, t.dataset, t.problem_id, g.correct,
                   coalesce(r.n_rollouts, 0) AS n_rollouts,
                   row_number() OVER (PARTITION BY t.teacher, t.dataset
                                      ORDER BY coalesce(r.n_rollouts, 0) = 0, t.problem_id, t.trace_id) AS rn
            FROM traces t LEFT JOIN r USING (trace_id) LEFT JOIN g USING (trace_id)
            WHERE (? IS NULL OR t.teacher = ?) AND (? IS NULL OR t.dataset = ?)
        )
        SELECT trace_id, teacher, dataset, problem_id, correct, n_rollouts FROM t
        WHERE ? IS NULL OR rn <= ?
        ORDER BY teacher, dataset, problem_id, trace_id
        """,
        [teacher, teacher, dataset, dataset, per_cell, per_cell],
    )
    return _rows(rows)


def trace_details(store: Store, trace_ids: list[str], tau: float, model: str) -> dict[str, dict[str, Any]]:
    """Per trace: question, steps (text, r_i, redundant = r_i > tau, backtracking flag), answer and
    the students' answers at every prefix depth."""
    import pyarrow as pa

    from legival_core.reports.backtracking import judge_backtracking

    if not trace_ids:
        return {}
    store.con.register("_ids", pa.table({"trace_id": trace_ids}))
    try:
        base = store.query(
            """
            SELECT t.trace_id, t.teacher, t.dataset, t.problem_id, t.reasoning, t.answer_text,
                   p.question, p.gold
            FROM traces t JOIN _ids USING (trace_id)
            LEFT JOIN problems p ON p.dataset = t.dataset AND p.problem_id = t.problem_id
            """
        )
        steps = store.query(
            "SELECT s.trace_id, s.idx, s.start_char, s.end_char FROM steps s JOIN _ids USING (trace_id) "
            "WHERE s.segmenter = ? ORDER BY s.trace_id, s.idx", [SEGMENTER_VERSION])
        sims = store.query(
            "SELECT s.trace_id, s.idx, s.max_prev_cos FROM step_similarity s JOIN _ids USING (trace_id) "
            "WHERE s.model = ? AND s.segmenter = ?", [model, SEGMENTER_VERSION])
        lexical = store.query(
            "SELECT m.trace_id, m.detail FROM trace_metrics m JOIN _ids USING (trace_id) "
            "WHERE m.metric = 'backtracking' AND m.method = 'lexical' AND m.status = 'ok'")
        rollouts = store.query(
            """
            SELECT r.trace_id, coalesce(s.name, r.student_key) AS student, r.k, r.sample, r.m, r.status,
                   r.correct, r.forced, r.extracted, r.continuation, r.forced_continuation
            FROM rollouts r JOIN _ids USING (trace_id) LEFT JOIN students s USING (student_key)
            ORDER BY r.trace_id, student, r.k, r.sample
            """
        )
    finally:
        store.con.unregister("_ids")
    judged = judge_backtracking(store)
    judge_flags = _judge_flags(store, trace_ids)
    judge_method = dict(zip(judged["trace_id"].to_list(), judged["judge_method"].to_list(), strict=True))
    lex = {tid: _flag_list(detail) for tid, detail in lexical.iter_rows()}
    by_sim: dict[str, dict[int, float]] = {}
    for tid, idx, r in sims.iter_rows():
        by_sim.setdefault(tid, {})[int(idx)] = float(r)
    by_steps: dict[str, list[tuple[int, int, int]]] = {}
    for tid, idx, a, b in steps.iter_rows():
        by_steps.setdefault(tid, []).append((int(idx), int(a), int(b)))
    by_roll: dict[str, list[dict[str, Any]]] = {}
    for row in rollouts.iter_rows(named=True):
        tid = row.pop("trace_id")
        for key in ("continuation", "forced_continuation"):
            if row[key] is not None and len(row[key]) > CONTINUATION_CHARS:
                row[key] = row[key][:CONTINUATION_CHARS] + " […]"
        by_roll.setdefault(tid, []).append(row)
    out: dict[str, dict[str, Any]] = {}
    for row in base.iter_rows(named=True):
        tid = row["trace_id"]
        text = row["reasoning"]
        if tid in judge_flags:
            flags, method = set(judge_flags[tid]), judge_method.get(tid, "judge")
        else:
            flags, method = set(lex.get(tid, [])), "lexical" if tid in lex else None
        sim = by_sim.get(tid, {})
        step_list = [
            {"idx": idx, "text": text[a:b], "r": sim.get(idx), "redundant": sim.get(idx, -1.0) > tau,
             "backtracking": idx in flags}
            for idx, a, b in by_steps.get(tid, [])
        ]
        out[tid] = {
            "trace_id": tid, "teacher": row["teacher"], "dataset": row["dataset"], "problem_id": row["problem_id"],
            "question": row["question"], "gold": row["gold"], "answer_text": row["answer_text"],
            "reasoning": text if not step_list else None, "steps": step_list, "backtracking_method": method,
            "rollouts": by_roll.get(tid, []),
        }
    return out


def _judge_flags(store: Store, trace_ids: list[str]) -> dict[str, list[int]]:
    """flagged_steps of the newest `ok` judge result per trace (the one `judge_backtracking` uses)."""
    import pyarrow as pa

    store.con.register("_jids", pa.table({"trace_id": trace_ids}))
    try:
        rows = store.query(
            """
            SELECT trace_id, flagged_steps FROM judge_results JOIN _jids USING (trace_id)
            WHERE status = 'ok' AND fraction IS NOT NULL
            QUALIFY row_number() OVER (PARTITION BY trace_id ORDER BY created_at DESC, judge_key) = 1
            """
        )
    finally:
        store.con.unregister("_jids")
    return {tid: _flag_list(flags) for tid, flags in rows.iter_rows()}


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
    traces = trace_list(store, per_cell=None if live else per_cell) if store is not None else []
    details = {} if live or store is None else trace_details(
        store, [t["trace_id"] for t in traces], data.tau, data.model)
    curves: dict[str, dict[str, list[Any]]] = {}
    for row in data.tu_curves.sort("teacher", "bin").iter_rows(named=True):
        c = curves.setdefault(row["teacher"], {"mu": [], "lo": [], "hi": []})
        c["mu"].append(row["mu"])
        c["lo"].append(row["ci_low"])
        c["hi"].append(row["ci_high"])
    from legival_core.reports.stats import correlation_matrix

    metrics = data.correlation_metrics
    mat = correlation_matrix(data.correlations, metrics)
    pvals = {(a, b): p for a, b, p in data.correlations.filter(data.correlations["kind"] == "spearman")
             .select("metric_a", "metric_b", "p_value").iter_rows()}
    boot = data.boot
    return {
        "meta": {"tau": data.tau, "model": data.model, "live": live,
                 "n_resamples": boot.n_resamples if boot else 0, "seed": boot.seed if boot else None,
                 "n_traces": data.traces.height, "n_students": data.students.height,
                 "students": data.students["student"].to_list(),
                 "datasets": sorted(data.traces["dataset"].unique().to_list()),
                 "per_cell": per_cell},
        "directions": data.directions,
        "ranked": [m for m in data.directions if f"rank_{m}" in data.teacher_metrics.columns],
        "ci_metrics": list(CI_METRICS),
        "teachers": _rows(data.teacher_metrics),
        "teacher_dataset": _rows(data.aggregates.by_dataset),
        "curves": curves,
        "correlations": {
            "metrics": metrics,
            "rho": [[None if math.isnan(v) else float(v) for v in r] for r in mat.tolist()],
            "p": [[pvals.get((a, b), pvals.get((b, a))) for b in metrics] for a in metrics],
            "partial": _rows(data.correlations.filter(data.correlations["kind"] == "partial_spearman")),
        },
        "rank_pairs": _rows(data.rank_pairs.filter(data.rank_pairs["distinguishable"] == False)),  # noqa: E712
        "images": images or {},
        "traces": traces,
        "details": details,
    }


def dashboard_html(data: ReportData, store: Store | None, per_cell: int = 10, live: bool = False,
                   image_dir: Path | None = None) -> str:
    """The whole page as one string. Figures are read from `image_dir` (the report directory) when
    given; `write_report` writes them first."""
    from legival_core.reports.plots import PLOT_FILES

    images = {}
    if image_dir is not None:
        for name in PLOT_FILES:
            p = image_dir / name
            if p.exists():
                images[name] = "data:image/png;base64," + base64.b64encode(p.read_bytes()).decode("ascii")
    payload = safe_json(page_data(data, store, per_cell, live, images))
    return _TEMPLATE.replace("/*DATA*/", payload, 1)


_TEMPLATE = """<!DOCTYPE html>
<html lang="en">
<head>
<meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<meta http-equiv="Content-Security-Policy" content="default-src 'none'; script-src 'unsafe-inline'; style-src 'unsafe-inline'; img-src data:; connect-src 'self'">
<link rel="icon" href="data:,">
<title>Legi-Val report</title>
<style>
:root { --fg:#1d2330; --muted:#667085; --line:#e4e7ec; --bg:#f7f8fa; --accent:#2f6fde; --good:#1a7f4b; --bad:#b42318; }
* { box-sizing: border-box; }
body { margin:0; font:14px/1.45 system-ui, -apple-system, "Segoe UI", Roboto, sans-serif; color:var(--fg); background:var(--bg); }
header { background:#17213a; color:#fff; padding:18px 28px; }
header h1 { margin:0 0 4px; font-size:22px; }
header .sub { color:#b9c2d6; font-size:13px; }
nav { position:sticky; top:0; z-index:5; background:#fff; border-bottom:1px solid var(--line); padding:8px 28px; display:flex; gap:18px; flex-wrap:wrap; }
nav a { color:var(--accent); text-decoration:none; font-weight:500; }
main { padding:18px 28px 60px; max-width:1500px; }
section { background:#fff; border:1px solid var(--line); border-radius:10px; padding:16px 20px; margin:0 0 18px; }
section h2 { margin:0 0 6px; font-size:17px; }
p.note { color:var(--muted); margin:2px 0 12px; font-size:12.5px; }
table.grid { border-collapse:collapse; width:100%; font-size:12.5px; }
table.grid th, table.grid td { border-bottom:1px solid var(--line); padding:5px 8px; text-align:right; white-space:nowrap; }
table.grid th { background:#f1f3f7; position:sticky; top:0; cursor:pointer; user-select:none; }
table.grid th.sorted-asc::after { content:" \\25B2"; font-size:9px; } table.grid th.sorted-desc::after { content:" \\25BC"; font-size:9px; }
table.grid td:first-child, table.grid th:first-child { text-align:left; }
.rank { display:inline-block; min-width:22px; padding:0 5px; border-radius:8px; font-size:11px; margin-left:6px; color:#fff; text-align:center; }
.chg-up { color:var(--good); font-size:11px; margin-left:3px; } .chg-down { color:var(--bad); font-size:11px; margin-left:3px; }
.scroll { overflow-x:auto; max-height:560px; overflow-y:auto; }
.row { display:flex; gap:18px; flex-wrap:wrap; align-items:flex-start; }
.card { flex:1 1 460px; min-width:380px; }
svg text { font-size:11px; fill:#344054; }
.tip { position:fixed; pointer-events:none; background:#111827; color:#fff; padding:6px 9px; border-radius:6px; font-size:12px; white-space:pre; display:none; z-index:20; }
label { font-size:12.5px; color:var(--muted); margin-right:10px; }
select { font:inherit; padding:3px 6px; margin-left:4px; max-width:380px; }
.figs { display:grid; grid-template-columns:repeat(auto-fill,minmax(460px,1fr)); gap:14px; }
.figs figure { margin:0; border:1px solid var(--line); border-radius:8px; padding:8px; background:#fff; }
.figs img { width:100%; height:auto; } .figs figcaption { color:var(--muted); font-size:12px; }
.steps { list-style:none; padding:0; margin:8px 0; counter-reset:none; }
.steps li { padding:6px 10px; border-left:4px solid transparent; margin:2px 0; background:#fafbfc; border-radius:4px; white-space:pre-wrap; word-break:break-word; }
.steps li.redundant { border-left-color:#f79009; background:#fffaeb; }
.steps li.backtracking { border-left-color:#7a5af8; background:#f4f3ff; }
.steps li.redundant.backtracking { border-left-color:#d92d20; }
.steps .num { color:var(--muted); font-size:11px; margin-right:8px; font-variant-numeric:tabular-nums; }
.badge { display:inline-block; font-size:10.5px; border-radius:9px; padding:0 7px; margin-left:6px; color:#fff; }
.b-red { background:#f79009; } .b-bt { background:#7a5af8; } .b-depth { background:#475467; }
.depth { margin:4px 0 6px 26px; font-size:12px; }
.depth span.ans { display:inline-block; margin:1px 8px 1px 0; padding:1px 7px; border-radius:5px; border:1px solid var(--line); background:#fff; }
.ok { color:var(--good); font-weight:600; } .no { color:var(--bad); font-weight:600; }
.box { background:#f8f9fb; border:1px solid var(--line); border-radius:6px; padding:8px 10px; white-space:pre-wrap; word-break:break-word; margin:6px 0; }
.legend span { margin-right:14px; font-size:12px; }
.empty { color:var(--muted); font-style:italic; }
.curve-toggle { font-size:12px; margin-right:10px; white-space:nowrap; }
</style>
</head>
<body>
<script type="application/json" id="legival-data">/*DATA*/</script>
<header><h1>Legi-Val report</h1><div class="sub" id="subtitle"></div></header>
<nav><a href="#ranks">Rank table</a><a href="#pareto">Pareto</a><a href="#curves">TU curves</a><a href="#corr">Correlations</a><a href="#td">Teacher x dataset</a><a href="#figures">Figures</a><a href="#browser">Trace browser</a></nav>
<main>
<section id="ranks"><h2>Teachers: values and ranks</h2>
<p class="note">Rank 1 = best (shorter, less redundant, less backtracking, higher FOTU, higher SOTU, lower regression rate). Arrows: rank change against the accuracy rank. Hover a cell for its 95% bootstrap interval (resampling problems) and the teachers it cannot be told apart from. Click a header to sort.</p>
<div class="scroll"><table class="grid" id="rank-table"></table></div></section>
<section id="pareto"><h2>Pareto frontier</h2>
<p class="note">A teacher is on the frontier (filled, outlined) when no other teacher is at least as good on both axes and better on one. Whiskers: 95% bootstrap intervals. Hover a point for its values.</p>
<div><label>x axis<select id="px"></select></label><label>y axis<select id="py"></select></label></div>
<div id="pareto-plot"></div></section>
<section id="curves"><h2>Transfer-utility curves mu_T(b)</h2>
<p class="note">Mean student correctness after reading the first k/m of the teacher's reasoning, averaged over traces, students and datasets; shaded: 95% bootstrap band. Hover for values; untick a teacher to hide it.</p>
<div id="curve-toggles"></div><div id="curve-plot"></div></section>
<section id="corr"><h2>Spearman correlations across teachers</h2>
<p class="note">Model level: each teacher's metrics averaged over datasets. Hover a cell for rho, p-value and n. Below: partial Spearman controlling for token length (FOTU | length).</p>
<div class="scroll" id="corr-table"></div><div class="scroll" id="partial-table" style="margin-top:12px"></div></section>
<section id="td"><h2>Teacher x dataset</h2><div class="scroll"><table class="grid" id="td-table"></table></div></section>
<section id="figures"><h2>Figures</h2><div class="figs" id="figs"></div></section>
<section id="browser"><h2>Trace browser</h2>
<p class="note">Pick a trace to read its steps. <span class="badge b-red">redundant</span> r_i = max cosine similarity to an earlier step above tau; <span class="badge b-bt">backtracking</span> flagged by the judge (or the lexical fallback). Under a step: each student's answer after reading the reasoning up to that step.</p>
<div><label>teacher<select id="bt-teacher"></select></label><label>dataset<select id="bt-dataset"></select></label><label>trace<select id="bt-trace"></select></label></div>
<div id="trace-view"></div></section>
</main>
<div class="tip" id="tip"></div>
<script>
"use strict";
(function () {
const D = JSON.parse(document.getElementById("legival-data").textContent);
const SVGNS = "http://www.w3.org/2000/svg";
const PALETTE = ["#2f6fde","#e8590c","#2b8a3e","#c2255c","#7048e8","#0c8599","#e67700","#5c940d","#a61e4d","#1864ab","#862e9c","#d9480f","#087f5b","#495057"];
const tip = document.getElementById("tip");

function el(tag, attrs, text) {
  const e = document.createElement(tag);
  if (attrs) for (const k of Object.keys(attrs)) e.setAttribute(k, attrs[k]);
  if (text !== undefined && text !== null) e.textContent = String(text);
  return e;
}
function sv(tag, attrs, text) {
  const e = document.createElementNS(SVGNS, tag);
  if (attrs) for (const k of Object.keys(attrs)) e.setAttribute(k, attrs[k]);
  if (text !== undefined && text !== null) e.textContent = String(text);
  return e;
}
function fmt(v, digits) {
  if (v === null || v === undefined) return "\\u2013";
  if (typeof v === "boolean") return v ? "yes" : "no";
  if (typeof v !== "number") return String(v);
  if (Number.isInteger(v)) return String(v);
  const d = digits === undefined ? (Math.abs(v) >= 100 ? 1 : 3) : digits;
  return v.toFixed(d);
}
function showTip(ev, text) { tip.textContent = text; tip.style.display = "block"; tip.style.left = (ev.clientX + 14) + "px"; tip.style.top = (ev.clientY + 12) + "px"; }
function hideTip() { tip.style.display = "none"; }
function hover(node, textFn) {
  node.addEventListener("mousemove", (ev) => showTip(ev, textFn()));
  node.addEventListener("mouseleave", hideTip);
}
const teachers = D.teachers.map((t) => t.teacher);
const color = {};
teachers.forEach((t, i) => { color[t] = PALETTE[i % PALETTE.length]; });

document.getElementById("subtitle").textContent =
  teachers.length + " teachers \\u00b7 " + D.meta.datasets.length + " datasets (" + D.meta.datasets.join(", ") + ") \\u00b7 " +
  D.meta.n_students + " students" + (D.meta.students.length ? " (" + D.meta.students.join(", ") + ")" : "") +
  " \\u00b7 " + D.meta.n_traces + " traces \\u00b7 redundancy tau = " + D.meta.tau +
  " \\u00b7 bootstrap: " + D.meta.n_resamples + " resamples over problems" + (D.meta.live ? " \\u00b7 live" : "");

/* ---------- rank table ---------- */
function sortable(table, rows, columns, render) {
  let key = null, dir = 1;
  function draw() {
    table.replaceChildren();
    const thead = el("thead"), tr = el("tr");
    columns.forEach((c) => {
      const th = el("th", null, c.label);
      if (c.title) th.title = c.title;
      if (key === c.key) th.className = dir > 0 ? "sorted-asc" : "sorted-desc";
      th.addEventListener("click", () => { if (key === c.key) dir = -dir; else { key = c.key; dir = 1; } draw(); });
      tr.appendChild(th);
    });
    thead.appendChild(tr); table.appendChild(thead);
    const sorted = rows.slice();
    if (key !== null) {
      const col = columns.find((c) => c.key === key);
      const sk = col.sortKey || ((r) => r[key]);
      sorted.sort((a, b) => {
        const x = sk(a), y = sk(b);
        if (x === null || x === undefined) return 1;
        if (y === null || y === undefined) return -1;
        return (x < y ? -1 : x > y ? 1 : 0) * dir;
      });
    }
    const tbody = el("tbody");
    sorted.forEach((r) => { const tr2 = el("tr"); columns.forEach((c) => tr2.appendChild(render(r, c))); tbody.appendChild(tr2); });
    table.appendChild(tbody);
  }
  draw();
}
function rankColor(r, n) {
  if (r === null || r === undefined) return "#98a2b3";
  const f = n > 1 ? (r - 1) / (n - 1) : 0;
  const hue = 130 - 125 * f;
  return "hsl(" + hue + ",55%,40%)";
}
(function rankTable() {
  const n = teachers.length;
  const cols = [{ key: "teacher", label: "teacher" }];
  D.ranked.forEach((m) => cols.push({ key: m, label: m, title: (D.directions[m] === "higher" ? "higher" : "lower") + " is better",
    sortKey: (r) => r["rank_" + m] }));
  cols.push({ key: "student_baseline_acc", label: "student_baseline_acc", title: "students' accuracy with no reasoning (k = 0)" });
  cols.push({ key: "on_pareto_frontier", label: "Pareto (len, FOTU)" });
  cols.push({ key: "n_traces", label: "traces" });
  cols.push({ key: "n_transfer_traces", label: "transfer traces" });
  cols.push({ key: "n_rollouts", label: "rollouts" });
  sortable(document.getElementById("rank-table"), D.teachers, cols, (r, c) => {
    const td = el("td");
    if (c.key === "teacher") {
      const sw = el("span"); sw.style.cssText = "display:inline-block;width:10px;height:10px;border-radius:2px;margin-right:6px;background:" + color[r.teacher];
      td.appendChild(sw); td.appendChild(document.createTextNode(r.teacher)); return td;
    }
    td.appendChild(document.createTextNode(fmt(r[c.key])));
    const rk = r["rank_" + c.key];
    if (D.ranked.includes(c.key)) {
      const b = el("span", { class: "rank" }, rk === null || rk === undefined ? "\\u2013" : rk);
      b.style.background = rankColor(rk, n); td.appendChild(b);
      const ch = r["rank_change_" + c.key];
      if (ch) td.appendChild(el("span", { class: ch > 0 ? "chg-up" : "chg-down" }, (ch > 0 ? "\\u2191" : "\\u2193") + Math.abs(ch)));
    }
    if (D.ci_metrics.includes(c.key)) {
      hover(td, () => {
        let s = c.key + " = " + fmt(r[c.key]) + "\\n95% CI " + fmt(r[c.key + "_ci_low"]) + " \\u2013 " + fmt(r[c.key + "_ci_high"]);
        if (D.ranked.includes(c.key)) {
          s += "\\nrank " + fmt(rk) + " (95% CI " + fmt(r["rank_" + c.key + "_ci_low"], 1) + " \\u2013 " + fmt(r["rank_" + c.key + "_ci_high"], 1) + ")";
          const ind = r["rank_" + c.key + "_indistinct_from"];
          s += "\\nnot distinguishable from: " + (ind ? ind.split(";").join(", ") : "none");
        }
        return s;
      });
    }
    return td;
  });
})();

/* ---------- generic SVG axes ---------- */
function axes(svg, W, H, m, xr, yr, xlabel, ylabel) {
  const sx = (v) => m.l + (v - xr[0]) / ((xr[1] - xr[0]) || 1) * (W - m.l - m.r);
  const sy = (v) => H - m.b - (v - yr[0]) / ((yr[1] - yr[0]) || 1) * (H - m.t - m.b);
  svg.appendChild(sv("rect", { x: m.l, y: m.t, width: W - m.l - m.r, height: H - m.t - m.b, fill: "#fcfcfd", stroke: "#e4e7ec" }));
  for (let i = 0; i <= 5; i++) {
    const xv = xr[0] + (xr[1] - xr[0]) * i / 5, yv = yr[0] + (yr[1] - yr[0]) * i / 5;
    svg.appendChild(sv("line", { x1: sx(xv), x2: sx(xv), y1: m.t, y2: H - m.b, stroke: "#f0f1f4" }));
    svg.appendChild(sv("line", { x1: m.l, x2: W - m.r, y1: sy(yv), y2: sy(yv), stroke: "#f0f1f4" }));
    svg.appendChild(sv("text", { x: sx(xv), y: H - m.b + 14, "text-anchor": "middle" }, fmt(xv, Math.abs(xr[1]) >= 100 ? 0 : 2)));
    svg.appendChild(sv("text", { x: m.l - 6, y: sy(yv) + 4, "text-anchor": "end" }, fmt(yv, Math.abs(yr[1]) >= 100 ? 0 : 2)));
  }
  svg.appendChild(sv("text", { x: (m.l + W - m.r) / 2, y: H - 4, "text-anchor": "middle" }, xlabel));
  svg.appendChild(sv("text", { x: 12, y: (m.t + H - m.b) / 2, "text-anchor": "middle", transform: "rotate(-90 12 " + ((m.t + H - m.b) / 2) + ")" }, ylabel));
  return { sx, sy };
}
function extent(vals, pad) {
  const v = vals.filter((x) => x !== null && x !== undefined && !Number.isNaN(x));
  if (!v.length) return [0, 1];
  let lo = Math.min(...v), hi = Math.max(...v);
  if (lo === hi) { lo -= 0.5 * (Math.abs(lo) || 1) * 0.1; hi += 0.5 * (Math.abs(hi) || 1) * 0.1; }
  const p = (hi - lo) * (pad || 0.08);
  return [lo - p, hi + p];
}

/* ---------- Pareto ---------- */
(function pareto() {
  const numeric = D.ranked.concat(["student_baseline_acc"]);
  const px = document.getElementById("px"), py = document.getElementById("py");
  numeric.forEach((m) => { px.appendChild(el("option", { value: m }, m)); py.appendChild(el("option", { value: m }, m)); });
  px.value = "token_len_median"; py.value = numeric.includes("fotu") ? "fotu" : numeric[0];
  function frontier(pts, xd, yd) {
    const sxs = xd === "higher" ? 1 : -1, sys = yd === "higher" ? 1 : -1;
    return pts.map((p) => !pts.some((q) => q !== p && sxs * q.x >= sxs * p.x && sys * q.y >= sys * p.y && (sxs * q.x > sxs * p.x || sys * q.y > sys * p.y)));
  }
  function draw() {
    const host = document.getElementById("pareto-plot"); host.replaceChildren();
    const xm = px.value, ym = py.value;
    const pts = D.teachers.filter((r) => r[xm] !== null && r[ym] !== null && r[xm] !== undefined && r[ym] !== undefined)
      .map((r) => ({ t: r.teacher, x: r[xm], y: r[ym], xl: r[xm + "_ci_low"], xh: r[xm + "_ci_high"], yl: r[ym + "_ci_low"], yh: r[ym + "_ci_high"], r }));
    if (!pts.length) { host.appendChild(el("p", { class: "empty" }, "No teacher has both " + xm + " and " + ym + " yet (transfer metrics need rollouts).")); return; }
    const W = 760, H = 430, m = { l: 62, r: 20, t: 16, b: 40 };
    const svg = sv("svg", { width: W, height: H, viewBox: "0 0 " + W + " " + H, role: "img", "aria-label": "Pareto plot" });
    const xs = pts.flatMap((p) => [p.x, p.xl, p.xh]), ys = pts.flatMap((p) => [p.y, p.yl, p.yh]);
    const { sx, sy } = axes(svg, W, H, m, extent(xs), extent(ys), xm + " (" + (D.directions[xm] || "") + " is better)", ym + " (" + (D.directions[ym] || "") + " is better)");
    const on = frontier(pts, D.directions[xm] || "higher", D.directions[ym] || "higher");
    const fr = pts.filter((p, i) => on[i]).sort((a, b) => a.x - b.x);
    if (fr.length > 1) svg.appendChild(sv("polyline", { points: fr.map((p) => sx(p.x) + "," + sy(p.y)).join(" "), fill: "none", stroke: "#98a2b3", "stroke-dasharray": "5 4" }));
    pts.forEach((p, i) => {
      const g = sv("g", { class: "pt" });
      if (p.xl !== null && p.xl !== undefined) g.appendChild(sv("line", { x1: sx(p.xl), x2: sx(p.xh), y1: sy(p.y), y2: sy(p.y), stroke: color[p.t], "stroke-opacity": 0.5 }));
      if (p.yl !== null && p.yl !== undefined) g.appendChild(sv("line", { x1: sx(p.x), x2: sx(p.x), y1: sy(p.yl), y2: sy(p.yh), stroke: color[p.t], "stroke-opacity": 0.5 }));
      g.appendChild(sv("circle", { cx: sx(p.x), cy: sy(p.y), r: on[i] ? 7 : 5, fill: on[i] ? color[p.t] : "#fff", stroke: color[p.t], "stroke-width": 2 }));
      g.appendChild(sv("text", { x: sx(p.x) + 9, y: sy(p.y) - 7 }, p.t));
      hover(g, () => p.t + "\\n" + xm + " = " + fmt(p.x) + "  [" + fmt(p.xl) + ", " + fmt(p.xh) + "]\\n" + ym + " = " + fmt(p.y) + "  [" + fmt(p.yl) + ", " + fmt(p.yh) + "]\\n" + (on[i] ? "on the Pareto frontier" : "dominated"));
      svg.appendChild(g);
    });
    host.appendChild(svg);
  }
  px.addEventListener("change", draw); py.addEventListener("change", draw); draw();
})();

/* ---------- TU curves ---------- */
(function curves() {
  const host = document.getElementById("curve-plot"), toggles = document.getElementById("curve-toggles");
  const names = Object.keys(D.curves).sort();
  if (!names.length) { host.appendChild(el("p", { class: "empty" }, "No transfer curves yet: run `legival transfer` to create student rollouts.")); return; }
  const shown = {}; names.forEach((t) => { shown[t] = true; });
  names.forEach((t) => {
    const lab = el("label", { class: "curve-toggle" }); const cb = el("input", { type: "checkbox" }); cb.checked = true;
    cb.addEventListener("change", () => { shown[t] = cb.checked; draw(); });
    const sw = el("span", null, "\\u25A0 "); sw.style.color = color[t] || "#333";
    lab.appendChild(cb); lab.appendChild(sw); lab.appendChild(document.createTextNode(t)); toggles.appendChild(lab);
  });
  function draw() {
    host.replaceChildren();
    const W = 760, H = 400, m = { l: 52, r: 20, t: 14, b: 40 };
    const svg = sv("svg", { width: W, height: H, viewBox: "0 0 " + W + " " + H, role: "img", "aria-label": "transfer-utility curves" });
    const { sx, sy } = axes(svg, W, H, m, [0, 1], [0, 1], "prefix fraction k/m", "mean student correctness");
    names.filter((t) => shown[t]).forEach((t) => {
      const c = D.curves[t], B = c.mu.length;
      const x = (i) => sx((i + 1) / B);
      if (c.lo.every((v) => v !== null)) {
        const up = c.hi.map((v, i) => x(i) + "," + sy(v)), dn = c.lo.map((v, i) => x(i) + "," + sy(v)).reverse();
        svg.appendChild(sv("polygon", { points: up.concat(dn).join(" "), fill: color[t], "fill-opacity": 0.13, stroke: "none" }));
      }
      const line = sv("polyline", { points: c.mu.map((v, i) => x(i) + "," + sy(v)).join(" "), fill: "none", stroke: color[t], "stroke-width": 2 });
      svg.appendChild(line);
    });
    const cursor = sv("line", { y1: m.t, y2: H - m.b, stroke: "#98a2b3", visibility: "hidden" }); svg.appendChild(cursor);
    const overlay = sv("rect", { x: m.l, y: m.t, width: W - m.l - m.r, height: H - m.t - m.b, fill: "transparent" });
    overlay.addEventListener("mousemove", (ev) => {
      const box = svg.getBoundingClientRect(); const px2 = (ev.clientX - box.left) * (W / box.width);
      const f = Math.min(1, Math.max(0, (px2 - m.l) / (W - m.l - m.r)));
      const lines = ["prefix fraction \\u2264 " + fmt(f, 2)];
      names.filter((t) => shown[t]).forEach((t) => {
        const c = D.curves[t], B = c.mu.length, i = Math.min(B - 1, Math.max(0, Math.ceil(f * B) - 1));
        lines.push(t + ": " + fmt(c.mu[i]) + (c.lo[i] !== null ? "  [" + fmt(c.lo[i]) + ", " + fmt(c.hi[i]) + "]" : ""));
      });
      cursor.setAttribute("x1", sx(f)); cursor.setAttribute("x2", sx(f)); cursor.setAttribute("visibility", "visible");
      showTip(ev, lines.join("\\n"));
    });
    overlay.addEventListener("mouseleave", () => { hideTip(); cursor.setAttribute("visibility", "hidden"); });
    svg.appendChild(overlay);
    host.appendChild(svg);
  }
  draw();
})();

/* ---------- correlations ---------- */
(function corr() {
  const C = D.correlations, host = document.getElementById("corr-table");
  const t = el("table", { class: "grid" }); const hr = el("tr"); hr.appendChild(el("th", null, ""));
  C.metrics.forEach((m) => hr.appendChild(el("th", null, m))); const th = el("thead"); th.appendChild(hr); t.appendChild(th);
  const tb = el("tbody");
  C.metrics.forEach((a, i) => {
    const tr = el("tr"); tr.appendChild(el("td", null, a));
    C.metrics.forEach((b, j) => {
      const v = C.rho[i][j]; const td = el("td", null, v === null ? "\\u2013" : v.toFixed(2));
      if (v !== null) { const s = Math.abs(v); td.style.background = v >= 0 ? "rgba(214,40,40," + (0.08 + 0.5 * s) + ")" : "rgba(40,90,214," + (0.08 + 0.5 * s) + ")"; }
      if (i !== j) hover(td, () => a + " vs " + b + "\\nrho = " + fmt(v) + "\\np = " + fmt(C.p[i][j], 4));
      tr.appendChild(td);
    });
    tb.appendChild(tr);
  });
  t.appendChild(tb); host.appendChild(t);
  const ph = document.getElementById("partial-table");
  if (C.partial.length) {
    const pt = el("table", { class: "grid" });
    sortable(pt, C.partial, [{ key: "metric_a", label: "metric" }, { key: "metric_b", label: "with" }, { key: "control", label: "controlling for" }, { key: "rho", label: "partial rho" }, { key: "p_value", label: "p" }, { key: "n", label: "n" }],
      (r, c) => el("td", null, fmt(r[c.key])));
    ph.appendChild(el("h3", { style: "font-size:14px;margin:8px 0 4px" }, "Partial Spearman (controlling for length)")); ph.appendChild(pt);
  }
})();

/* ---------- teacher x dataset ---------- */
(function tdTable() {
  if (!D.teacher_dataset.length) return;
  const keys = Object.keys(D.teacher_dataset[0]);
  sortable(document.getElementById("td-table"), D.teacher_dataset, keys.map((k) => ({ key: k, label: k })), (r, c) => el("td", null, fmt(r[c.key])));
})();

/* ---------- figures ---------- */
(function figs() {
  const host = document.getElementById("figs");
  const caps = { "rank_table.png": "Ranks per metric", "pareto.png": "Pareto frontiers", "tu_curves.png": "Transfer-utility curves", "correlations.png": "Spearman matrix", "redundancy_elbow.png": "Redundancy threshold elbow" };
  Object.keys(caps).forEach((name) => {
    if (!D.images[name]) return;
    const f = el("figure"); const img = el("img", { alt: caps[name], "data-name": name }); img.src = D.images[name];
    f.appendChild(img); f.appendChild(el("figcaption", null, caps[name] + " (" + name + ")")); host.appendChild(f);
  });
})();

/* ---------- trace browser ---------- */
(function browser() {
  const selT = document.getElementById("bt-teacher"), selD = document.getElementById("bt-dataset"), selX = document.getElementById("bt-trace");
  const view = document.getElementById("trace-view");
  let list = D.traces;
  const details = D.details;
  function fill(sel, values, labels) { sel.replaceChildren(); values.forEach((v, i) => sel.appendChild(el("option", { value: v }, labels ? labels[i] : v))); }
  const allT = Array.from(new Set(teachers.concat(list.map((t) => t.teacher)))).sort();
  fill(selT, allT); fill(selD, D.meta.datasets);
  async function loadList() {
    if (D.meta.live) {
      const u = "/api/traces?teacher=" + encodeURIComponent(selT.value) + "&dataset=" + encodeURIComponent(selD.value);
      const r = await fetch(u); list = await r.json();
      return list;
    }
    return list.filter((t) => t.teacher === selT.value && t.dataset === selD.value);
  }
  async function refreshTraces() {
    const rows = await loadList();
    fill(selX, rows.map((t) => t.trace_id), rows.map((t) => t.problem_id + (t.correct ? "  \\u2713" : "  \\u2717") + (t.n_rollouts ? "  (" + t.n_rollouts + " rollouts)" : "")));
    await show();
  }
  async function getDetail(id) {
    if (details[id]) return details[id];
    if (D.meta.live) { const r = await fetch("/api/trace?id=" + encodeURIComponent(id)); details[id] = await r.json(); return details[id]; }
    return null;
  }
  async function show() {
    view.replaceChildren();
    const id = selX.value;
    if (!id) { view.appendChild(el("p", { class: "empty" }, "No trace for this teacher and dataset" + (D.meta.live ? "." : " in the dashboard sample (legival serve browses all)."))); return; }
    const d = await getDetail(id);
    if (!d) { view.appendChild(el("p", { class: "empty" }, "Trace details are not in this page.")); return; }
    view.appendChild(el("div", { class: "legend" }, d.teacher + " \\u00b7 " + d.dataset + " \\u00b7 problem " + d.problem_id + " \\u00b7 trace " + d.trace_id + " \\u00b7 backtracking method: " + (d.backtracking_method || "none")));
    if (d.question) { view.appendChild(el("h3", { style: "font-size:14px;margin:10px 0 2px" }, "Question")); view.appendChild(el("div", { class: "box" }, d.question)); }
    if (d.gold) view.appendChild(el("div", { class: "legend" }, "gold answer: " + d.gold));
    const byK = {};
    d.rollouts.forEach((r) => { (byK[r.k] = byK[r.k] || []).push(r); });
    const depthLine = (k) => {
      const rs = byK[k]; if (!rs) return null;
      const div = el("div", { class: "depth" }); div.appendChild(el("span", { class: "badge b-depth" }, "k = " + k));
      rs.forEach((r) => {
        const s = el("span", { class: "ans" });
        s.appendChild(document.createTextNode(r.student + ": "));
        if (r.status !== "ok") s.appendChild(el("span", { class: "no" }, r.status));
        else {
          s.appendChild(el("span", { class: r.correct ? "ok" : "no" }, (r.correct ? "\\u2713 " : "\\u2717 ") + (r.extracted === null ? "(no answer)" : r.extracted)));
          if (r.forced) s.appendChild(el("span", { class: "badge b-depth" }, "forced"));
        }
        const cont = [r.continuation, r.forced_continuation].filter((x) => x).join("\\n[forced] ");
        if (cont) s.title = cont;
        div.appendChild(s);
      });
      return div;
    };
    view.appendChild(el("h3", { style: "font-size:14px;margin:10px 0 2px" }, "Reasoning (" + d.steps.length + " steps)"));
    const d0 = depthLine(0); if (d0) { view.appendChild(el("div", { class: "legend" }, "Before any reasoning:")); view.appendChild(d0); }
    if (!d.steps.length) view.appendChild(el("div", { class: "box" }, d.reasoning || "(no steps)"));
    const ol = el("ul", { class: "steps" });
    d.steps.forEach((s) => {
      const li = el("li"); const cls = [];
      if (s.redundant) cls.push("redundant"); if (s.backtracking) cls.push("backtracking");
      li.className = cls.join(" ");
      li.appendChild(el("span", { class: "num" }, s.idx));
      li.appendChild(document.createTextNode(s.text));
      if (s.redundant) li.appendChild(el("span", { class: "badge b-red" }, "redundant r=" + fmt(s.r, 2)));
      if (s.backtracking) li.appendChild(el("span", { class: "badge b-bt" }, "backtracking"));
      if (s.r !== null && s.r !== undefined && !s.redundant) li.title = "r_i = " + fmt(s.r, 3);
      ol.appendChild(li);
      const dl = depthLine(s.idx); if (dl) ol.appendChild(dl);
    });
    view.appendChild(ol);
    view.appendChild(el("h3", { style: "font-size:14px;margin:10px 0 2px" }, "Answer"));
    view.appendChild(el("div", { class: "box" }, d.answer_text));
  }
  selT.addEventListener("change", refreshTraces); selD.addEventListener("change", refreshTraces); selX.addEventListener("change", show);
  const first = list[0];
  if (first) { selT.value = first.teacher; selD.value = first.dataset; }
  window.legivalShowTrace = async function (id) {
    const t = list.find((x) => x.trace_id === id) || (details[id] ? details[id] : null);
    if (t) { selT.value = t.teacher; selD.value = t.dataset; await refreshTraces(); selX.value = id; }
    await show();
  };
  refreshTraces();
})();
})();
</script>
</body>
</html>
"""

__all__ = ["dashboard_html", "safe_json", "trace_details", "trace_list", "RANKED_METRICS"]
