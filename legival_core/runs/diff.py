"""Run over run: what changed between two recorded runs, whether it exceeds the noise, and why.

Per (teacher, dataset, metric) -- dataset "all" for the teacher-level values -- the old and new
value, their difference, the 95% percentile interval of the difference over the bootstrap
replicates of both runs (the replicates resample problems; with the same seed and the same problems
the two runs draw the same resamples, so the interval of an unchanged teacher is exactly zero),
`outside_ci` = the interval excludes 0, the rank before and after, and the cause as far as the store
knows it: the run records' producer versions (`runs.record.dependencies`: a metric's parameters or
code version, the students, the graders, the judge) and inputs (new or replaced traces, new rollouts),
else the teachers added or removed (ranks and cross-teacher normalisations move with them).

Only rows that changed are listed; a teacher added or removed is one row (metric empty). Two
identical runs give an empty diff.
"""

from __future__ import annotations

import difflib
import json
import math
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from legival_core import markdown
from legival_core.metrics.base import all_metrics
from legival_core.runs.record import ALL, dependencies
from legival_core.store import Store
from legival_core.store import runs as run_reads

if TYPE_CHECKING:
    import polars as pl

REL_TOL = 1e-12
"""Values closer than this (relative) are equal: two runs of the same store print the same numbers."""


class RunNotFound(ValueError):
    """A `--from`/`--to` that names no stored run (the message lists what exists), or a `--from` not
    older than `--to`."""


def diff_schema() -> dict[str, Any]:
    import polars as pl

    return {"from_run": pl.Utf8, "to_run": pl.Utf8, "teacher": pl.Utf8, "dataset": pl.Utf8, "metric": pl.Utf8,
            "change": pl.Utf8, "old": pl.Float64, "new": pl.Float64, "delta": pl.Float64,
            "diff_ci_low": pl.Float64, "diff_ci_high": pl.Float64, "outside_ci": pl.Boolean,
            "rank_old": pl.Float64, "rank_new": pl.Float64, "cause": pl.Utf8}


@dataclass(frozen=True, slots=True)
class RunSnapshot:
    run: dict[str, Any]
    """The `runs` row, `versions` / `inputs` / `counts` decoded."""
    metrics: pl.DataFrame

    @property
    def run_id(self) -> str:
        return str(self.run["run_id"])

    @property
    def label(self) -> str:
        return f"#{self.run['seq']} {self.run_id}"


@dataclass(slots=True)
class Changes:
    """The diff of two runs (`frame`, `diff_schema`), or why there is none (`note`)."""

    frame: pl.DataFrame
    old: RunSnapshot | None = None
    new: RunSnapshot | None = None
    n_runs: int = 0
    note: str | None = None

    @property
    def teachers_added(self) -> list[str]:
        return self._teachers("teacher added")

    @property
    def teachers_removed(self) -> list[str]:
        return self._teachers("teacher removed")

    def _teachers(self, change: str) -> list[str]:
        return sorted(self.frame.filter(self.frame["change"] == change)["teacher"].to_list())


# --- choosing and loading runs -------------------------------------------------------------------------


def resolve_run(runs: pl.DataFrame, ref: str) -> dict[str, Any]:
    """A run by its id, a unique prefix of its id, or its sequence number (`legival runs` shows both)."""
    ref = ref.strip()
    rows = list(runs.iter_rows(named=True))
    hit = [r for r in rows if r["run_id"] == ref] or (
        [r for r in rows if str(r["seq"]) == ref.lstrip("#")] if ref.lstrip("#").isdigit() else []
    ) or [r for r in rows if r["run_id"].startswith(ref)]
    if len(hit) == 1:
        return hit[0]
    known = ", ".join(f"#{r['seq']} {r['run_id']}" for r in rows[-5:]) or "none (`legival run` records one per run)"
    if not hit:
        raise RunNotFound(f"no run {ref!r} in the store; latest runs: {known}")
    raise RunNotFound(f"run {ref!r} is ambiguous: it prefixes {len(hit)} run ids; give more of the id")


def load_snapshot(store: Store, run: dict[str, Any]) -> RunSnapshot:
    row = dict(run)
    for key in ("versions", "inputs", "counts"):
        row[key] = json.loads(row[key]) if isinstance(row.get(key), str) else (row.get(key) or {})
    return RunSnapshot(row, run_reads.run_metric_rows(store, str(run["run_id"])))


def changes(store: Store, from_ref: str | None = None, to_ref: str | None = None) -> Changes:
    """The diff of two stored runs: by default the last two; `--to` alone compares with the run before it."""
    import polars as pl

    runs = run_reads.runs(store)
    empty = pl.DataFrame(schema=diff_schema())
    rows = list(runs.iter_rows(named=True))
    new_row = resolve_run(runs, to_ref) if to_ref else (rows[-1] if rows else None)
    if from_ref:
        old_row: dict[str, Any] | None = resolve_run(runs, from_ref)
    else:
        before = [r for r in rows if new_row is not None and r["seq"] < new_row["seq"]]
        old_row = before[-1] if before else None
    if new_row is None or old_row is None:
        note = (f"needs two recorded runs, the store has {len(rows)}"
                + ("; `legival run` records one per run" if not rows else "")
                if not from_ref and not to_ref else "no earlier run to compare with")
        return Changes(empty, None, load_snapshot(store, new_row) if new_row else None, len(rows), note)
    if old_row["seq"] >= new_row["seq"]:
        raise RunNotFound(f"--from must name an older run than --to: #{old_row['seq']} {old_row['run_id']} is not "
                          f"older than #{new_row['seq']} {new_row['run_id']}")
    old, new = load_snapshot(store, old_row), load_snapshot(store, new_row)
    return Changes(diff_runs(old, new), old, new, len(rows))


# --- the diff ------------------------------------------------------------------------------------------


def diff_runs(old: RunSnapshot, new: RunSnapshot) -> pl.DataFrame:
    """Every changed (teacher, dataset, metric) of `new` against `old` (`diff_schema`), sorted: teachers
    added/removed first, then changes outside the interval, then by |delta|."""
    import polars as pl

    o = _by_key(old.metrics)
    n = _by_key(new.metrics)
    old_teachers = {k[0] for k in o}
    new_teachers = {k[0] for k in n}
    added, removed = sorted(new_teachers - old_teachers), sorted(old_teachers - new_teachers)
    rows: list[dict[str, Any]] = []
    for t in added:
        rows.append(_teacher_row(old, new, t, "teacher added", new.run["inputs"]))
    for t in removed:
        rows.append(_teacher_row(old, new, t, "teacher removed", old.run["inputs"]))
    ctx = _Context(old, new, added, removed)
    for key in sorted(set(o) | set(n)):
        teacher, dataset, metric = key
        if teacher in added or teacher in removed:
            continue
        a, b = o.get(key), n.get(key)
        va, vb = (a or {}).get("value"), (b or {}).get("value")
        ra, rb = (a or {}).get("rank"), (b or {}).get("rank")
        value_changed, rank_changed = not _same(va, vb), not _same(ra, rb)
        if not value_changed and not rank_changed:
            continue
        delta = vb - va if va is not None and vb is not None else None
        lo, hi = _diff_interval((a or {}).get("samples"), (b or {}).get("samples"))
        if not value_changed:
            change = "rank"
        elif va is None:
            change = "computed" if b is not None else "missing"
        elif vb is None:
            change = "missing"
        else:
            change = "changed"
        rows.append({
            "teacher": teacher, "dataset": dataset, "metric": metric, "change": change, "old": va, "new": vb,
            "delta": delta if value_changed else 0.0 if delta is not None else None,
            "diff_ci_low": lo, "diff_ci_high": hi,
            "outside_ci": None if lo is None or hi is None else bool(lo > 0 or hi < 0),
            "rank_old": ra, "rank_new": rb, "cause": ctx.cause(teacher, dataset, metric, value_changed),
        })
    frame = pl.DataFrame(
        [{"from_run": old.run_id, "to_run": new.run_id, **r} for r in rows], schema=diff_schema())
    order = (pl.when(pl.col("change") == "teacher added").then(0).when(pl.col("change") == "teacher removed").then(1)
             .when(pl.col("outside_ci")).then(2).otherwise(3))
    return frame.with_columns(order.alias("_o"), pl.col("delta").abs().fill_null(-1.0).alias("_d")).sort(
        ["_o", "_d", "teacher", "dataset", "metric"], descending=[False, True, False, False, False]).drop("_o", "_d")


def _by_key(frame: pl.DataFrame) -> dict[tuple[str, str, str], dict[str, Any]]:
    return {(r["teacher"], r["dataset"], r["metric"]): r for r in frame.iter_rows(named=True)}


def _same(a: float | None, b: float | None) -> bool:
    if a is None or b is None:
        return a is None and b is None
    if math.isnan(a) or math.isnan(b):
        return math.isnan(a) and math.isnan(b)
    return abs(a - b) <= REL_TOL * max(1.0, abs(a), abs(b))


def _diff_interval(a: bytes | None, b: bytes | None) -> tuple[float | None, float | None]:
    """95% percentile interval of (new - old) over the paired replicates; None without replicates."""
    import numpy as np

    if a is None or b is None:
        return None, None
    x, y = np.frombuffer(a, dtype=np.float32), np.frombuffer(b, dtype=np.float32)
    k = min(x.size, y.size)
    d = y[:k].astype(np.float64) - x[:k].astype(np.float64)
    d = d[~np.isnan(d)]
    if d.size == 0:
        return None, None
    return float(np.percentile(d, 2.5)), float(np.percentile(d, 97.5))


def _teacher_row(old: RunSnapshot, new: RunSnapshot, teacher: str, change: str,
                 inputs: dict[str, Any]) -> dict[str, Any]:
    cells = {k: v for k, v in inputs.items() if k.split("|", 1)[0] == teacher}
    n = sum(int(v.get("n_traces", 0)) for v in cells.values())
    datasets = sorted(k.split("|", 1)[1] for k in cells)
    where = "in the store" if change == "teacher added" else "no longer in the store"
    cause = f"{n} traces on {', '.join(datasets) or 'no dataset'} {where}" if cells else where
    return {"teacher": teacher, "dataset": ALL, "metric": "", "change": change, "old": None, "new": None,
            "delta": None, "diff_ci_low": None, "diff_ci_high": None, "outside_ci": None, "rank_old": None,
            "rank_new": None, "cause": cause}


class _Context:
    """The two runs' versions and inputs, and the teachers added/removed, for `cause`."""

    def __init__(self, old: RunSnapshot, new: RunSnapshot, added: list[str], removed: list[str]) -> None:
        self.vo, self.vn = old.run["versions"], new.run["versions"]
        self.io, self.in_ = old.run["inputs"], new.run["inputs"]
        self.added, self.removed = added, removed
        self.transfer = {m.name for m in all_metrics() if m.source == "transfer"}

    def cause(self, teacher: str, dataset: str, metric: str, value_changed: bool) -> str:
        parts: list[str] = []
        if value_changed:
            keys = dependencies(metric, {**self.vo, **self.vn})
            parts += [p for k in keys if (p := describe_version_change(k, self.vo.get(k), self.vn.get(k)))]
            parts += self._input_changes(teacher, dataset, metric in self.transfer)
        if not parts:
            if self.added:
                parts.append(f"teachers added: {', '.join(self.added)}")
            if self.removed:
                parts.append(f"teachers removed: {', '.join(self.removed)}")
        if not parts:
            parts.append("other teachers' values changed" if not value_changed else "no recorded input changed")
        return "; ".join(parts)

    def _input_changes(self, teacher: str, dataset: str, transfer: bool) -> list[str]:
        cells = sorted({k.split("|", 1)[1] for k in (*self.io, *self.in_) if k.split("|", 1)[0] == teacher}) \
            if dataset == ALL else [dataset]
        out: list[str] = []
        for d in cells:
            a, b = self.io.get(f"{teacher}|{d}"), self.in_.get(f"{teacher}|{d}")
            if a is None and b is not None:
                out.append(f"dataset added: {d} ({b['n_traces']} traces)")
                continue
            if b is None and a is not None:
                out.append(f"dataset removed: {d}")
                continue
            if a is None or b is None:
                continue
            if a["n_traces"] != b["n_traces"]:
                k = b["n_traces"] - a["n_traces"]
                out.append(f"{'new traces' if k > 0 else 'traces removed'}: {d} {k:+d}")
            elif a["ids_md5"] != b["ids_md5"]:
                out.append(f"traces replaced: {d}")
            if transfer:
                ro, rn = a.get("rollouts", {}), b.get("rollouts", {})
                for s in sorted(set(ro) | set(rn)):
                    k = int(rn.get(s, 0)) - int(ro.get(s, 0))
                    if k:
                        out.append(f"{'new rollouts' if k > 0 else 'rollouts removed'}: {d} {s} {k:+d}")
        return out


def describe_version_change(key: str, old: Any, new: Any) -> str | None:
    """One cause phrase for a producer key whose recorded version differs, else None."""
    if old == new:
        return None
    if key.startswith("metric:"):
        name = key.removeprefix("metric:")
        if old is None:
            return f"first computed: {name}"
        if new is None:
            return f"no longer computed: {name}"
        out = []
        if old.get("params") != new.get("params"):
            out.append(f"parameters changed: {name} ({_dict_delta(old.get('params'), new.get('params'))})")
        if old.get("code_version") != new.get("code_version"):
            out.append(f"code version changed: {name} ({old.get('code_version')} -> {new.get('code_version')})")
        return "; ".join(out) or None
    if key == "students":
        o, n = old or {}, new or {}
        out = [f"new student: {s}" for s in sorted(set(n) - set(o))]
        out += [f"student removed: {s}" for s in sorted(set(o) - set(n))]
        out += [f"student changed: {s} (model, decoding or prompt)" for s in sorted(set(o) & set(n)) if o[s] != n[s]]
        return "; ".join(out) or None
    if key == "graders":
        return f"grader changed: {_dict_delta(old, new)}"
    if key == "report":
        return f"report settings changed: {_dict_delta(old, new)}"
    return f"{key} changed: {', '.join(old or []) or 'none'} -> {', '.join(new or []) or 'none'}"


def _dict_delta(a: Any, b: Any) -> str:
    """`k old -> new` for each top-level key that differs (whole values when not both dicts)."""
    if not isinstance(a, dict) or not isinstance(b, dict):
        return f"{_short(a)} -> {_short(b)}"
    keys = sorted(k for k in set(a) | set(b) if a.get(k) != b.get(k))
    return ", ".join(f"{k} {_short(a.get(k))} -> {_short(b.get(k))}" for k in keys)


def _short(v: Any) -> str:
    text = v if isinstance(v, str) else json.dumps(v, sort_keys=True)
    return text if len(text) <= 40 else text[:37] + "..."


# --- gating a pipeline ----------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class FailRule:
    """`--fail-on METRIC:DELTA`: fail when a teacher's METRIC got worse by more than DELTA."""

    metric: str
    delta: float
    direction: str


def parse_fail_on(text: str) -> FailRule:
    """`fotu:0.05` -> FailRule; ValueError with what to write instead."""
    name, sep, value = text.partition(":")
    name = name.strip()
    if not sep or not name:
        raise ValueError(f"--fail-on {text!r}: write METRIC:DELTA, e.g. fotu:0.05")
    try:
        delta = float(value)
    except ValueError:
        raise ValueError(f"--fail-on {text!r}: DELTA {value!r} is not a number") from None
    if not math.isfinite(delta) or delta < 0:
        raise ValueError(f"--fail-on {text!r}: DELTA must be a non-negative number")
    info = {m.name: m for m in all_metrics()}.get(name)
    if info is None:
        directed = sorted(m.name for m in all_metrics() if m.direction is not None and not m.family)
        near = difflib.get_close_matches(name, directed, n=3)
        hint = f"did you mean {' or '.join(near)}? " if near else ""
        raise ValueError(f"--fail-on {text!r}: unknown metric {name!r}; {hint}`legival list metrics` lists them "
                         "(those with a direction can gate)")
    if info.direction is None:
        raise ValueError(f"--fail-on {text!r}: {name} has no better direction (it is a count or context)")
    return FailRule(name, delta, info.direction)


def regressions(frame: pl.DataFrame, rules: list[FailRule]) -> list[str]:
    """One line per teacher-level value that got worse than a rule allows, or that was computed
    before and is missing now (a gate must not pass because a number vanished)."""
    out = []
    for rule in rules:
        rows = frame.filter((frame["dataset"] == ALL) & (frame["metric"] == rule.metric))
        for r in rows.iter_rows(named=True):
            if r["change"] == "missing" and r["old"] is not None:
                out.append(f"{r['teacher']}: {rule.metric} {r['old']:.4g} -> missing (no value in the newer run)")
                continue
            if r["delta"] is None:
                continue
            worse = -r["delta"] if rule.direction == "higher" else r["delta"]
            if worse > rule.delta:
                out.append(f"{r['teacher']}: {rule.metric} {r['old']:.4g} -> {r['new']:.4g} "
                           f"(worse by {worse:.4g} > {rule.delta:g})")
    return out


def unmatched_rules(ch: Changes, rules: list[FailRule]) -> list[str]:
    """The rules whose metric has no teacher-level value in the newer run (a gate that checks nothing)."""
    if ch.new is None:
        return [r.metric for r in rules]
    m = ch.new.metrics
    have = set(m.filter((m["dataset"] == ALL) & m["value"].is_not_null())["metric"].to_list())
    return [r.metric for r in rules if r.metric not in have]


# --- text views -----------------------------------------------------------------------------------------


def headline(ch: Changes) -> str:
    """One line: which runs, how many changes, teachers added/removed."""
    if ch.old is None or ch.new is None:
        return f"changes since the last run: none to show ({ch.note})"
    f = ch.frame
    n_changed = f.filter(~f["change"].str.starts_with("teacher")).height
    n_out = f.filter(f["outside_ci"].fill_null(False)).height
    parts = [f"run {ch.old.label} -> {ch.new.label}: {n_changed} changed values/ranks ({n_out} outside the "
             "bootstrap interval of the difference)"]
    if ch.teachers_added:
        parts.append(f"teachers added: {', '.join(ch.teachers_added)}")
    if ch.teachers_removed:
        parts.append(f"teachers removed: {', '.join(ch.teachers_removed)}")
    return "; ".join(parts)


def diff_markdown(ch: Changes, limit: int = 40) -> str:
    """The Prefect artifact: the headline and the first `limit` rows."""
    lines = ["# Changes since the last run", "", markdown.cell(headline(ch)), ""]
    if ch.frame.height:
        cols = ["teacher", "dataset", "metric", "change", "old", "new", "delta", "outside_ci", "rank_old",
                "rank_new", "cause"]
        lines += [markdown.row(cols), "|" + "---|" * len(cols)]
        for r in ch.frame.head(limit).iter_rows(named=True):
            lines.append(markdown.row(markdown.cell(format_cell(r[c])) for c in cols))
        if ch.frame.height > limit:
            lines.append(f"\n{ch.frame.height - limit} more rows in diff.csv")
    return "\n".join(lines) + "\n"


def format_cell(v: Any) -> str:
    """A diff value as the tables show it (`legival diff` and the markdown artifact): "-" when missing,
    yes/no, 4 significant digits, lists comma-joined."""
    if v is None:
        return "-"
    if isinstance(v, bool):
        return "yes" if v else "no"
    if isinstance(v, float):
        return f"{v + 0.0:.4g}"
    if isinstance(v, list):
        return ",".join(str(x) for x in v)
    return str(v)
