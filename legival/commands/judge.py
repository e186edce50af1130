"""`legival judge` and `legival judge-agreement` (issue 5, SPEC section 3 "backtracking")."""

from __future__ import annotations

import time
from dataclasses import asdict
from pathlib import Path
from typing import Annotated, Any

import typer
from rich.markup import escape

from legival.app import DbOption, app, open_store, settings
from legival.console import emit_summary, err_console, fail, out_console, progress_bar
from legival.paths import Role
from legival_core.judges.records import BATCH_POLL_INTERVAL_S
from legival_core.run_config import Judge, default_of

DEFAULT_JUDGE = "gemini"
"""`legival judge` without --judge asks Gemini (a spec's `judge.name` defaults to `lexical`)."""


@app.command()
def judge(
    db: DbOption,
    judge_name: Annotated[str, typer.Option(
        "--judge", help="A registered judge (`legival list judges`). "
                        "Default gemini (a spec's judge defaults to lexical).")] = DEFAULT_JUDGE,
    model: Annotated[str | None, typer.Option(
        help="Judge model (gemini default: gemini-2.5-flash).")] = default_of(Judge, "model"),
    base_url: Annotated[str | None, typer.Option(
        "--base-url", help="Endpoint (else LEGIVAL_GEMINI_BASE_URL / LEGIVAL_OPENAI_BASE_URL).")
    ] = default_of(Judge, "base_url"),
    limit: Annotated[int | None, typer.Option(
        help="First N traces per (teacher, dataset), stable order.")] = default_of(Judge, "limit"),
    estimate: Annotated[bool, typer.Option("--estimate", help="Print tokens and dollars; call nothing.")] = False,
    concurrency: Annotated[int, typer.Option(help="Requests in flight at once.")] = default_of(Judge, "concurrency"),
    rpm: Annotated[float | None, typer.Option(help="Requests per minute limit.")] = default_of(Judge, "rpm"),
    max_cost_usd: Annotated[float | None, typer.Option(
        "--max-cost-usd", help="Refuse to start when the estimate is above this.")] = default_of(Judge, "max_cost_usd"),
    batch: Annotated[bool, typer.Option("--batch", help="Gemini Batch API (half price, resumable).")] = False,
    wait: Annotated[bool, typer.Option(help="With --batch: wait for the jobs and collect them.")] = True,
    poll_interval: Annotated[float, typer.Option(
        help="With --batch: seconds between polls.")] = BATCH_POLL_INTERVAL_S,
    price_input: Annotated[float | None, typer.Option(help="USD per million input tokens.")] = None,
    price_output: Annotated[float | None, typer.Option(help="USD per million output tokens.")] = None,
) -> None:
    """Backtracking by an LLM judge for the traces that have no result from that judge yet.

    Exits 2 with the cause on stderr when every call failed (an unreachable endpoint stops after its
    first traces; the others are not sent and stay to do); some failures: a warning, exit 0.
    --retry-failed (every command takes it) judges the traces stored as failed again; a failure a
    later call could turn out otherwise (unreachable, rate limits, server errors) is never stored."""
    from legival_core.judges import JudgeError, judge_info
    from legival_core.judges.factory import batch_judges
    from legival_core.llm.cost import CostLimitExceeded, Prices
    from legival_core.registry import UnknownName, canonical_name
    from legival_core.stages.judge import run_judge

    try:
        name = canonical_name("judge", judge_name)
    except UnknownName as e:
        fail(str(e))
    info = judge_info(name)
    if info.llm and info.needs_model and not model:
        fail(f"--judge {name} needs --model (the served model id)")
    if batch and not info.batch:
        fail(f"--batch needs --judge {' | '.join(batch_judges())} (a judge with a batch API)")
    cfg = settings(Judge, name=name, model=model, base_url=base_url, limit=limit, concurrency=concurrency, rpm=rpm,
                   max_cost_usd=max_cost_usd)
    d = Prices()
    prices = Prices(price_input if price_input is not None else d.input_usd_per_million,
                    price_output if price_output is not None else d.output_usd_per_million, d.batch_multiplier)
    t0 = time.perf_counter()
    with open_store(db) as store, progress_bar(f"judge {name}") as bar:
        try:
            s = run_judge(store, cfg, progress=lambda d, t: bar.update(done=d, total=t), estimate_only=estimate,
                          batch=batch, wait=wait, poll_interval_s=poll_interval,
                          prices=prices)
        except (CostLimitExceeded, JudgeError, ValueError, ImportError) as e:
            fail(str(e))
    wall = time.perf_counter() - t0
    out_console.print(
        f"judge {s.judge}/{s.model}: {s.selected} selected, {s.cached} cached, {s.judge_calls} judged "
        f"({s.ok} ok, {s.failed} failed, {s.overflow} overflow)"
        + (f", {s.not_sent} not sent" if s.not_sent else "") + f", {s.retries} retries; "
        f"estimated ${s.estimated_cost_usd:.4f}" + (f" ({s.estimate_basis})" if s.estimate_basis else "")
        + (" (estimate only, nothing sent)" if estimate else ""),
        markup=False, highlight=False,
    )
    summary: dict[str, Any] = {"command": "judge", **s.as_dict(), "wall_s": round(wall, 3)}
    if s.judge_calls and wall > 0:
        summary["calls_per_s"] = round(s.judge_calls / wall, 1)
    emit_summary(summary)  # the last line of stdout, also when the command then exits 2
    if s.every_call_failed:
        fail(s.failure_note())
    if note := s.failure_note():
        err_console.print(f"[bold yellow]warning:[/] {escape(note)}", markup=True, highlight=False, soft_wrap=True)


@app.command("judge-agreement")
def judge_agreement(
    human: Annotated[Path, typer.Option("--human", help="Human annotations (CSV or JSONL): trace_id, "
                                        "annotator, steps or count."), Role.INPUT],
    db: DbOption,
    judge_key: Annotated[str | None, typer.Option(
        "--judge-key", help="Judge key (or a unique prefix); default: the only judge with results.")] = None,
) -> None:
    """Human backtracking annotations vs the stored judge counts (and annotator vs annotator)."""
    from legival_core.judges import agreement, load_human_annotations
    from legival_core.stages.judge import stored_judge_counts

    t0 = time.perf_counter()
    try:
        ann = load_human_annotations(human)
    except ValueError as e:  # the loaders name the file themselves
        fail(str(e))
    except OSError as e:
        fail(f"{human}: {e.strerror or e}")
    with open_store(db) as store:
        try:
            sc = stored_judge_counts(store, sorted({a.trace_id for a in ann}), judge_key)
        except ValueError as e:
            fail(str(e))
    rep = agreement(ann, sc.counts, sc.datasets, sc.steps, sc.m)
    _print_agreement(rep)
    if rep.skipped_no_judge or rep.skipped_no_dataset:
        err_console.print(
            f"left out: {rep.skipped_no_judge} traces without an ok judge result, "
            f"{rep.skipped_no_dataset} traces not in the store", markup=False, highlight=False,
        )
    emit_summary({
        "command": "judge-agreement",
        "judge_key": sc.judge_key,
        "judge": f"{sc.judge}/{sc.model}",
        "annotations": len(ann),
        **asdict(rep),
        "wall_s": round(time.perf_counter() - t0, 3),
    })


def _print_agreement(rep: Any) -> None:
    from rich.table import Table

    table = Table(title="backtracking agreement per dataset (docs/judge.md: flag = count > 0, bins 0/1/2/3+, "
                        "steps = per-step flag; * saturated: 70% of a side's labels in one category)")
    for c in ("dataset", "pair", "n", "spearman", "kappa (counts)", "kappa (binary)", "AC1 (binary)",
              "kappa_w (bins)", "AC2 (bins)", "steps", "kappa (steps)", "AC1 (steps)"):
        table.add_column(c)
    for d in rep.per_dataset:
        for p in (*d.human_vs_judge, *d.human_vs_human):
            table.add_row(d.dataset, f"{p.a} vs {p.b}", str(p.n), _fmt(p.spearman), _fmt(p.kappa_counts),
                          _fmt(p.kappa_binary, p.flag.saturated), _fmt(p.flag.gwet, p.flag.saturated),
                          _fmt(p.binned.kappa, p.binned.saturated), _fmt(p.binned.gwet, p.binned.saturated),
                          str(p.steps.n), _fmt(p.steps.kappa, p.steps.saturated), _fmt(p.steps.gwet, p.steps.saturated))
    out_console.print(table)
    out_console.print(
        f"Kendall tau across datasets, mean human vs judge: {_fmt(rep.kendall_tau_mean_human_vs_judge)}; "
        + ", ".join(f"{a}: {_fmt(v)}" for a, v in rep.kendall_tau_per_annotator),
        markup=False, highlight=False,
    )


def _fmt(v: float | None, saturated: bool = False) -> str:
    return "-" if v is None else f"{v:.3f}" + ("*" if saturated else "")
