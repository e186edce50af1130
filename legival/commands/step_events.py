"""`legival step-events`: compute the step events (docs/step_events.md), show one trace step by step, or list a
teacher's segments with the most drops across students.

The two views only read the store (opened read-only). Every string that comes from a trace (its text,
ids, teacher and student names) reaches the terminal as a rich `Text` built from plain strings, never
read as markup, its control characters written as escapes (`legival.tables.visible`). Like `legival
runs`, a view ends with the JSON line holding what it showed (docs/CLI.md: the closing JSON line is the
machine output of every command).
"""

from __future__ import annotations

import functools
import re
import time
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer

from legival.app import DbOption, app, open_store, settings
from legival.console import emit_summary, err_console, fail, out_console, progress_bar
from legival.tables import visible
from legival_core.run_config import Efficiency, default_of

if TYPE_CHECKING:
    import polars as pl
    from rich.text import Text

    from legival_core.store import Store

EXCERPT_CHARS = 100
"""A step's text shown in a view is cut to this many characters (whitespace runs collapsed)."""
TOP_DEFAULT = 10
MARKERS = {"correct": ("C", "bold green"), "wrong": ("W", "bold red"), "forced correct": ("c", "green"),
           "forced wrong": ("w", "red"), "overflow": ("O", "yellow"), "other": ("?", "dim")}
"""A student's sample at a depth, as the view draws it (the legend prints this table)."""


@app.command("step-events")
def step_events(
    db: DbOption,
    trace: Annotated[str | None, typer.Option("--trace", help="Show this trace step by step.")] = None,
    teacher: Annotated[str | None, typer.Option(
        "--teacher", help="List this teacher's segments with the most drops across students.")] = None,
    top: Annotated[int | None, typer.Option(
        "--top", min=1, help=f"How many segments --teacher lists (default {TOP_DEFAULT}).")] = None,
    dataset: Annotated[str | None, typer.Option("--dataset", help="With --teacher: only this dataset's traces.")] = None,
    tau: Annotated[float, typer.Option(help="Redundancy threshold (SPEC: 0.8).")] = default_of(Efficiency, "tau"),
    model: Annotated[str, typer.Option(help="Embedding model of the r_i the events read.")] = default_of(
        Efficiency, "model"),
) -> None:
    """Step events: each segment between two rollout depths, its outcome and its steps' features
    (computes only the pairs whose inputs changed); --trace / --teacher show them."""
    config = settings(Efficiency, tau=tau, model=model)
    if trace is not None and teacher is not None:
        fail("--trace and --teacher are two views: give one of them")
    if dataset is not None and teacher is None:
        fail("--dataset filters the list of --teacher: give --teacher too")
    if top is not None and teacher is None:
        fail("--top sizes the list of --teacher: give --teacher too")
    given_model = model if model != default_of(Efficiency, "model") else None
    if trace is not None:
        with open_store(db, read_only=True) as store:
            _trace_view(store, db, trace, config, given_model)
        return
    if teacher is not None:
        with open_store(db, read_only=True) as store:
            _top_view(store, db, teacher, dataset, TOP_DEFAULT if top is None else top)
        return
    from legival_core.stages.step_events import compute_step_events
    from legival_core.store import step_events as step_reads

    t0 = time.perf_counter()
    with open_store(db) as store, progress_bar("step events") as bar:
        s = compute_step_events(store, config, progress=lambda done, total: bar.update(done=done, total=total))
        stored = step_reads.stored_pairs(store)
        rollouts = step_reads.has_rollouts(store)
    if not rollouts:
        err_console.print(f"no rollouts: run legival transfer --db {db} first (the step events cut its curves)",
                          markup=False, highlight=False, soft_wrap=True)
    emit_summary({"command": "step-events", **s.as_dict(), "stored_pairs": stored,
                  "wall_s": round(time.perf_counter() - t0, 3)})


# --- one trace, step by step ----------------------------------------------------------------------------


def excerpt(text: str, limit: int = EXCERPT_CHARS) -> str:
    """The start of a step's text on one line: whitespace runs collapsed, control characters escaped."""
    one = visible(re.sub(r"\s+", " ", text).strip())
    return one if len(one) <= limit else one[:limit - 1] + "\u2026"


def _flagged(raw: str | None) -> set[int]:
    """The step numbers of a stored flag list (a JSON list or {"steps": [...]}), read as the step_events stage
    reads them (every integer in it)."""
    return {int(x) for x in re.findall(r"\d+", raw or "")}


def _marker(status: str, correct: bool | None, forced: bool | None) -> str:
    if status == "overflow":
        return "overflow"
    if status != "ok" or correct is None:
        return "other"
    return f"{'forced ' if forced else ''}{'correct' if correct else 'wrong'}"


def _graders(dataset: str) -> pl.DataFrame:
    """The current grader of `dataset` (none when it is no longer registered): the trace's grade by it."""
    import polars as pl

    from legival_core.datasets.base import current_graders

    try:
        return current_graders([dataset])
    except KeyError:
        return pl.DataFrame(schema={"dataset": pl.Utf8, "grader": pl.Utf8})


def _not_run(db: Path, correct: bool | None, m: int) -> str:
    """The step events' status of a trace without rollouts: not a transfer trace (transfer rolls out the
    correct traces with a step or more), or transfer not run on it."""
    if correct is False:
        return "not a transfer trace: graded wrong: transfer rolls out correct traces only"
    if m == 0:
        return "not a transfer trace: no steps: transfer rolls out segmented traces only (legival segment --db DB)"
    graded = "" if correct else f"legival grade --db {db}, then "
    return f"not run: {graded}legival transfer --db {db} (no rollouts), then legival step-events --db {db}"


def _trace_view(store: Store, db: Path, trace_id: str, config: Efficiency, given_model: str | None = None) -> None:
    import polars as pl

    from legival_core.metrics.backtracking import BACKTRACKING
    from legival_core.metrics.redundancy import similarity_model
    from legival_core.segment import SEGMENTER_VERSION
    from legival_core.store import dashboard as dash_reads
    from legival_core.store import step_events as step_reads
    from legival_core.transfer.step_events import CODE_VERSION, step_cues

    if not step_reads.trace_exists(store, trace_id):
        close = step_reads.close_trace_ids(store, trace_id)
        hint = f" (did you mean {', '.join(close)}?)" if close else ""
        fail(f"{db}: no trace '{visible(trace_id)}' in the store{hint}")
    dataset = step_reads.trace_dataset(store, trace_id)
    rows = dash_reads.trace_rows(store, [trace_id], _graders(dataset), similarity_model(config), SEGMENTER_VERSION,
                                 BACKTRACKING.name)
    base = rows.base.row(0, named=True)
    text = base["reasoning"]
    spans = [(int(i), int(a), int(b)) for _t, i, a, b in rows.steps.iter_rows()]
    step_text = [text[a:b] for _i, a, b in spans]
    idx = [i for i, _a, _b in spans]
    if rows.judge_flags.height:
        flags, method = _flagged(rows.judge_flags["flagged_steps"][0]), str(rows.judge_flags["judge_method"][0])
    elif rows.lexical.height:
        flags, method = _flagged(rows.lexical["detail"][0]), "lexical"
    else:
        flags, method = set(), None
    r_i = {int(i): float(r) for _t, i, r in rows.similarities.iter_rows() if r is not None}
    answers, checks = step_cues(step_text, idx, base["dataset"], base["gold"])
    events = step_reads.trace_events(store, [trace_id]).filter(pl.col("code_version") == CODE_VERSION)
    roll = rows.rollouts
    students = sorted(set(roll["student"].to_list()))
    depths: dict[int, dict[str, list[str]]] = {}
    for r in roll.iter_rows(named=True):
        depths.setdefault(int(r["k"]), {}).setdefault(r["student"], []).append(
            _marker(r["status"], r["correct"], r["forced"]))
    moves = {(int(r["k_end"]), r["student"]): r["outcome"] for r in events.iter_rows(named=True)}
    in_drop: dict[int, list[str]] = {}
    for r in events.filter(pl.col("outcome") == "drop").iter_rows(named=True):
        for i in range(int(r["k_start"]) + 1, int(r["k_end"]) + 1):
            in_drop.setdefault(i, []).append(r["student"])
    if events.height:
        status = "computed"
    elif roll.height == 0:
        status = _not_run(db, base["correct"], len(spans))
    else:
        status = f"not run: legival step-events --db {db}"

    efficiency = f"legival efficiency --db {db}" + (f" --model {given_model}" if given_model else "")

    def out(line: Text) -> None:
        out_console.print(line, soft_wrap=True, highlight=False)

    out(_text(("trace ", "bold"), (visible(trace_id), "bold"), (f"  teacher {visible(base['teacher'])}  dataset "
             f"{visible(base['dataset'])}  problem {visible(base['problem_id'])}  m = {len(spans)} steps", "")))
    out(_text((f"backtracking flags: {method or f'not run: legival efficiency --db {db}'}; redundant: r_i > "
               f"{config.tau:g} ({'r_i stored' if r_i else f'no r_i: {efficiency}'}); step events: "
               f"{status}", "dim")))
    out(_text(("markers: ", "dim"), *[(f"{m} {name}  ", style) for name, (m, style) in MARKERS.items()],
              ("| a drop's steps are marked DROP (student)", "dim")))
    lines: list[dict[str, Any]] = []
    if 0 in depths:
        out(_depth_line(0, depths[0], students, moves))
    for i, body in zip(idx, step_text, strict=True):
        tags = [t for t, on in (("backtracking", i in flags), ("redundant", r_i.get(i, -1.0) > config.tau),
                                ("self-check", i in checks), ("answer", i in answers)) if on]
        dropped = in_drop.get(i, [])
        parts: list[tuple[str, str]] = [(f"{i:>4} ", "bold red" if dropped else "bold")]
        parts += [(f"[{t}] ", "yellow") for t in tags]
        if dropped:
            parts.append((f"DROP ({', '.join(visible(s) for s in sorted(set(dropped)))}) ", "bold red"))
        parts.append((excerpt(body), "red" if dropped else ""))
        out(_text(*parts))
        lines.append({"idx": i, "flags": tags, "r_i": r_i.get(i), "drop_students": sorted(set(dropped)),
                      "text": excerpt(body)})
        if i in depths:
            out(_depth_line(i, depths[i], students, moves))
    if not spans:
        out(_text(("no steps stored for this trace (the segment stage has not run on it)", "dim")))
    emit_summary({"command": "step-events", "view": "trace", "trace_id": trace_id, "teacher": base["teacher"],
                  "dataset": base["dataset"], "problem_id": base["problem_id"], "m": len(spans),
                  "backtracking_method": method, "events_status": status, "events": events.height,
                  "drops": events.filter(pl.col("outcome") == "drop").height if events.height else None,
                  "students": students,
                  "steps": lines, "depths": [{"k": k, "markers": v} for k, v in sorted(depths.items())]})


def _depth_line(k: int, at: dict[str, list[str]], students: list[str], moves: dict[tuple[int, str], str]) -> Text:
    parts: list[tuple[str, str]] = [(f"     k={k}: ", "cyan")]
    for s in students:
        marks = at.get(s)
        if marks is None:
            continue
        parts.append((f"{visible(s)} ", "cyan"))
        parts += [(MARKERS[m][0], MARKERS[m][1]) for m in marks]
        move = moves.get((k, s))
        if move in ("drop", "rise"):
            parts.append((" \u2193drop" if move == "drop" else " \u2191rise", "bold red" if move == "drop" else "green"))
        parts.append(("   ", ""))
    return _text(*parts)


def _text(*parts: tuple[str, str]) -> Text:
    """A line from plain strings and styles: nothing in a string is read as markup or an emoji code."""
    from rich.text import Text

    line = Text()
    for s, style in parts:
        line.append(s, style=style or None)
    return line


# --- a teacher's segments with the most drops ------------------------------------------------------------


def _top_view(store: Store, db: Path, teacher: str, dataset: str | None, top: int) -> None:
    from legival_core.segment import SEGMENTER_VERSION
    from legival_core.store import step_events as step_reads
    from legival_core.transfer.step_events import CODE_VERSION

    known = step_reads.step_teachers(store)
    if teacher not in known:
        fail(f"{db}: no teacher '{visible(teacher)}' in the store (teachers: {_listed(known)})")
    if dataset is not None:
        datasets = step_reads.teacher_datasets(store, teacher)
        if dataset not in datasets:
            fail(f"{db}: teacher '{visible(teacher)}' has no trace of dataset '{visible(dataset)}' (its datasets: "
                 f"{_listed(datasets)})")
    seg = step_reads.top_drop_segments(store, teacher, CODE_VERSION, top, SEGMENTER_VERSION, dataset)
    ran = step_reads.stored_pairs(store) > 0
    where = f"{visible(teacher)}" + (f" on {visible(dataset)}" if dataset is not None else "")
    def out(line: Text) -> None:
        out_console.print(line, soft_wrap=True, highlight=False)

    if seg.height == 0:
        why = (f"no drop among the stored step events of {where}" if ran else
               f"no step events: not run: legival step-events --db {db}")
        out(_text((why, "")))
    else:
        out(_text((f"{seg.height} segment(s) of {where} with the most drops across students "
                   "(drops / students who saw the segment)", "bold")))
    rows = _top_rows(seg)
    for n, r in enumerate(rows, start=1):
        out(_text((f"{n:>3}. ", "bold"), (f"{r['n_drops']}/{r['n_students']} ", "bold red"),
                  (f"{visible(r['trace_id'])} ", "cyan"), (f"{visible(r['dataset'])}/{visible(r['problem_id'])} ", "dim"),
                  (f"steps {r['k_start'] + 1}..{r['k_end']}: ", ""), (r["text"], "")))
    emit_summary({"command": "step-events", "view": "top", "teacher": teacher, "dataset": dataset, "top": top,
                  "events_stored": ran, "segments": rows})


def _listed(names: list[str], limit: int = 20) -> str:
    shown = ", ".join(visible(t) for t in names[:limit])
    return (shown + (f" and {len(names) - limit} more" if len(names) > limit else "")) or "none"


def _top_rows(seg: pl.DataFrame) -> list[dict[str, Any]]:
    return [{**r, "text": excerpt(r["text"] or "", 2 * EXCERPT_CHARS)} for r in seg.iter_rows(named=True)]


@app.command("steps", hidden=True)
@functools.wraps(step_events)
def steps_alias(**kwargs: Any) -> None:
    """The old name of `legival step-events` (before issue 46, "steps" also named the segmentation's
    steps and the engines' decode steps): it still works, and says the new name."""
    err_console.print("note: `legival steps` is now `legival step-events` (the old name still works)", markup=False,
                      highlight=False, soft_wrap=True)
    step_events(**kwargs)
