"""The dashboard's sections of the paper tables and figures: static HTML built here, every string
escaped (`html.escape`), each section showing its PNG and every row of its CSV with `fmt_cell`, so the
page and the files carry the same numbers. No script, no network: images are data URIs."""

from __future__ import annotations

import base64
import html
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from legival_core.reports.compute.aggregate import model_students
from legival_core.reports.compute.coverage import stage_command
from legival_core.reports.compute.human import human_study_of
from legival_core.reports.compute.reward_watch import reward_watch_of
from legival_core.reports.compute.step_effects import ALL
from legival_core.reports.render.bundle import Report
from legival_core.reports.render.html_table import empty_html, fmt_cell, table_html
from legival_core.reports.render.monitor_sections import early_answering_html, monitorability_html
from legival_core.reports.render.plots import step_analysis_of
from legival_core.runs.diff import headline

if TYPE_CHECKING:
    import polars as pl


@dataclass(frozen=True, slots=True)
class Section:
    id: str
    title: str
    note: str
    tables: tuple[str, ...]
    """CSV files shown (`paper.PAPER_CSV`, or `rank_stability.csv` / `delta_tu.csv`)."""
    png: str


SECTIONS: tuple[Section, ...] = (
    Section("pf-rank-points", "Global legibility ranking by rank points (Legi-Val Fig. 1 / Fig. 9)",
            "Per metric, points = N - rank + 1 (N = teachers ranked on it); the global rank orders the sums. "
            "dataset 'all' = teacher level; the other rows rank within one dataset.", ("rank_points.csv",),
            "rank_points.png"),
    Section("pf-accuracy-frontier", "Teacher accuracy vs transfer utility (Legi-Val Fig. 4)",
            "Pareto frontier on (accuracy higher, transfer metric by its direction).", ("accuracy_frontier.csv",),
            "accuracy_frontier.png"),
    Section("pf-fotu-scatter", "FOTU vs SOTU, accuracy and reward-model score (Legi-Val Fig. 5)",
            "Teacher level; rho, p and n: Spearman across teachers of the panel.", ("fotu_scatter.csv",),
            "fotu_scatter.png"),
    Section("pf-rm", "Reward models vs transfer utility (Legi-Val Fig. 7, Table 6)",
            "level 'trace': per trace (FOTU, RR: means over students); level 'model': the teachers' mean RM "
            "score against their transfer metrics and accuracy.", ("rm_correlations.csv",), "rm_fotu.png"),
    Section("pf-rank-by-student", "Rank progression by student (Legi-Val Fig. 8)",
            "Each teacher's rank (1 = best) on each transfer metric, per student.", ("rank_by_student.csv",),
            "rank_by_student.png"),
    Section("pf-students", "Across students (Legi-Val Tables 4 and 5)",
            "Spearman rho of the teachers' values between two students, and |delta TU| per teacher.",
            ("rank_stability.csv", "delta_tu.csv"), "student_stability.png"),
    Section("pf-clarity-profile", "Clarity profile per teacher (gCoT Fig. 7 / Table 3)",
            "Means over the teacher's traces with a clarity score.", ("clarity_profile.csv",), "clarity_profile.png"),
    Section("pf-clx-regression", "Informativeness on CLX within each teacher (gCoT Table 4)",
            "Least-squares slope with its 95% t interval, per teacher and informativeness metric.",
            ("clx_regression.csv",), "clx_regression.png"),
    Section("pf-gcot-dimensions", "gCoT dimensions and the Global Index",
            "Dimension score = mean of its min-max normalised metrics; rho_global_index = Spearman across "
            "teachers of the dimension with the Global Index.", ("gcot_dimensions.csv",), "gcot_dimensions.png"),
)
NAV = (("pf-rank-points", "Legi-Val figures"), ("pf-clarity-profile", "gCoT analyses"),
       ("pf-steps", "Where readers get lost"), ("pf-human", "Can people follow it?"),
       ("pf-monitorability", "Monitorability"), ("pf-early", "Early answering"), ("pf-reward", "Training reward"))


def section_table(report: Report, name: str) -> pl.DataFrame:
    """The rows a section shows for one of its files (the student rows of rank_stability.csv)."""
    import polars as pl

    if name == "rank_stability.csv":
        return report.data.rank_stability.filter(pl.col("axis") == "student")
    if name == "delta_tu.csv":
        return report.data.delta_tu
    return report.paper[name]


def _empty_note(report: Report, name: str) -> str:
    if name in ("rank_stability.csv", "delta_tu.csv"):
        return f"needs two students with rollouts; the store has {report.data.students.height}"
    return "no rows"


def sections_html(report: Report, image_dir: Path | None) -> str:
    """Every paper section, in `SECTIONS` order."""
    e = html.escape
    parts = []
    for s in SECTIONS:
        files = ", ".join(f"<code>{e(f)}</code>" for f in (*s.tables, s.png))
        out = [f'<section id="{e(s.id)}" class="paper"><h2>{e(s.title)}</h2>',
               f'<p class="note">{e(s.note)} Files: {files}.</p>']
        png = image_dir / s.png if image_dir is not None else None
        if png is not None and png.exists():
            uri = "data:image/png;base64," + base64.b64encode(png.read_bytes()).decode("ascii")
            out.append(f'<figure class="paperfig"><img alt="{e(s.title)}" data-name="{e(s.png)}" src="{uri}">'
                       "</figure>")
        for name in s.tables:
            frame = section_table(report, name)
            if len(s.tables) > 1:
                out.append(f'<h3 class="sub">{e(name)}</h3>')
            out.append(table_html(frame, name) if frame.height else
                       empty_html(name, _empty_note(report, name)))
        out.append("</section>")
        parts.append("".join(out))
    parts.append(steps_html(report, image_dir))
    parts.append(human_html(report))
    parts.append(monitorability_html(report))
    parts.append(early_answering_html(report, image_dir))
    parts.append(reward_html(report))
    return "\n".join(parts)


def reward_html(report: Report) -> str:
    """"Training reward: the Goodhart watch": per logged reward and step bucket, the reward, correctness,
    transfer and the watch student with their bootstrap bands (reward_watch.csv, docs/reward.md)."""
    import polars as pl

    table = reward_watch_of(report.data)
    out = ['<section id="pf-reward" class="paper"><h2>Training reward: the Goodhart watch</h2>',
           '<p class="note">What a training loop\'s legibility reward scored (legival reward serve, the TRL and '
           "verl adapters): per step bucket the mean reward, correctness, transfer (the reward's student) and the "
           "watch student (held out, never rewarded), their gap over correct completions, 95% bootstrap bands over "
           "items. A widening gap: the policy learns the reward's student, not legibility. File: "
           "<code>reward_watch.csv</code> (docs/reward.md).</p>"]
    computed = table.filter(pl.col("status") == "computed")
    if computed.height == 0:
        out.append(empty_html("reward_watch.csv", str(table["status"][0])) + "</section>")
        return "".join(out)
    out.append(table_html(computed.select("reward_name", "step_from", "step_to", "n", "reward", "correct", "transfer",
                                           "watch", "gap", "gap_low", "gap_high"), "reward_watch.csv"))
    out.append("</section>")
    return "".join(out)


TOP_FEATURES = 3
"""Features shown per scope in "Where readers get lost" (by risk difference for a drop)."""
STEPS_CAVEAT = (
    "Association, not causation: a feature that goes with drops may hurt the student, or may only be where a "
    "teacher writes when a problem is hard. The bootstrap over problems accounts for shared problems, not for "
    "such confounders (docs/step_events.md).")


def _interval(lo: object, hi: object) -> str:
    return f"[{fmt_cell(lo)}, {fmt_cell(hi)}]" if lo is not None and hi is not None else "\u2013"


def steps_html(report: Report, image_dir: Path | None) -> str:
    """"Where readers get lost": per scope (all teachers, then each teacher) the features with the
    largest risk difference for a drop, with their 95% interval and event counts; the features without
    an estimate and why; the share of shared segments every student dropped; the caveat. Steps not
    run: the command that computes them."""
    import polars as pl

    e = html.escape
    steps = step_analysis_of(report.data)
    files = ", ".join(f"<code>{e(f)}</code>" for f in ("step_effects.csv", "step_logistic.csv",
                                                       "student_agreement.csv", "step_events.parquet",
                                                       "step_effects.png"))
    out = ['<section id="pf-steps" class="paper"><h2>Where readers get lost: step effects per teacher</h2>',
           f'<p class="note">Risk difference = P(drop | the segment has the feature) - P(drop | it has not), '
           f"among the segments between two rollout depths whose student could drop; 95% percentile interval of "
           f"a bootstrap over problems. {e(STEPS_CAVEAT)} Files: {files}.</p>"]
    effects = steps.effects
    not_run = f"not run: {stage_command('step_events')}"
    if effects.height == 0 or (effects["status"] == not_run).all():
        out.append(empty_html("step_effects.csv", not_run) + "</section>")
        return "".join(out)
    png = image_dir / "step_effects.png" if image_dir is not None else None
    if png is not None and png.exists():
        uri = "data:image/png;base64," + base64.b64encode(png.read_bytes()).decode("ascii")
        out.append(f'<figure class="paperfig"><img alt="Step effects" data-name="step_effects.png" src="{uri}">'
                   "</figure>")
    drops = effects.filter(pl.col("outcome") == "drop")
    scopes = [ALL, *[x for x in dict.fromkeys(drops["scope"].to_list()) if x != ALL]]
    top = []
    for scope in scopes:
        rows = drops.filter((pl.col("scope") == scope) & (pl.col("status") == "computed")).sort(
            "risk_difference", "feature", descending=[True, False], nulls_last=True).head(TOP_FEATURES)
        top += [{"scope": scope, "feature": r["feature"], "risk_difference": r["risk_difference"],
                 "rd_95_ci": _interval(r["rd_ci_low"], r["rd_ci_high"]),
                 "drops_exposed": f"{r['events_exposed']} / {r['n_exposed']}",
                 "drops_unexposed": f"{r['events_unexposed']} / {r['n_unexposed']}", "n_events": r["n_events"],
                 "n_problems": r["n_problems"], "p_permutation": r["p_permutation"]} for r in rows.iter_rows(named=True)]
    out.append(f'<h3 class="sub">Top {TOP_FEATURES} features by risk difference for a drop, per scope</h3>')
    if top:
        out.append(table_html(pl.DataFrame(top), "step_effects.csv"))
    else:
        out.append('<p class="empty" data-file="step_effects.csv">no feature has an estimate for a drop '
                   "(the reasons below)</p>")
    missing = drops.filter((pl.col("scope") == ALL) & (pl.col("status") != "computed"))
    if missing.height:
        items = "".join(f"<li><code>{e(f)}</code>: {e(st)}</li>" for f, st in missing.select("feature", "status").iter_rows())
        out.append(f'<p class="note">Without an estimate for a drop (all teachers):</p><ul class="note">{items}</ul>')
    agree = steps.agreement.select("scope", "status", "n_segments", "n_all_drop", "share_all_drop", "n_rated",
                                   "drop_prevalence", "saturated", "fleiss_kappa", "gwet_ac1", "kappa_status")
    out.append('<h3 class="sub">Do students agree? Segments two students or more saw and one dropped: the share '
               "every one of them dropped; over the segments they could drop, Fleiss' kappa and Gwet's AC1 "
               "(drops are rare: read AC1 where saturated)</h3>")
    out.append(table_html(agree, "student_agreement.csv"))
    out.append("</section>")
    return "".join(out)


def human_html(report: Report) -> str:
    """"Can people follow it?": human FOTU per teacher with its interval beside each model student's,
    the agreement of people and students (Spearman of teacher FOTU, Cohen's kappa per item), the
    ratings against FOTU, and who was excluded; the command to run when there is no study or no grade."""
    import polars as pl

    table = human_study_of(report.data)
    out = ['<section id="pf-human" class="paper"><h2>Can people follow it? The human study</h2>',
           '<p class="note">People as one more student (<code>human</code>): FOTU on the depths they answered, '
           "pooled over participants; 95% intervals of a bootstrap over participants and problems (Spearman: over "
           "problems). Participants who failed an attention check are excluded and counted. Files: "
           "<code>human_study.csv</code>, <code>teacher_dataset_student_metrics.csv</code> (docs/study.md).</p>"]
    computed = table.filter(pl.col("status") == "computed")
    if computed.height == 0:
        out.append(empty_html("human_study.csv", str(table["status"][0])) + "</section>")
        return "".join(out)
    fotu = table.filter((pl.col("section") == "teacher") & (pl.col("metric") == "fotu"))
    models = model_students(report.data.aggregates.by_student).group_by(
        "teacher", "student").agg(pl.col("fotu").mean()).group_by("teacher").agg(
        pl.col("fotu").mean().alias("model_fotu"))
    of = dict(models.iter_rows())
    rows = [{"teacher": r["teacher"], "human_fotu": r["value"], "fotu_95_ci": _interval(r["ci_low"], r["ci_high"]),
             "students_fotu": of.get(r["teacher"]), "n_traces": r["n"], "n_answers": r["n_answers"],
             "n_participants": r["n_participants"]} for r in fotu.iter_rows(named=True)]
    if rows:
        out.append('<h3 class="sub">Human FOTU per teacher, beside the model students\' mean</h3>')
        out.append(table_html(pl.DataFrame(rows), "human_study.csv"))
    agree = table.filter(pl.col("section").is_in(["spearman_fotu", "kappa", "ratings", "participants"])).select(
        "section", "student", "metric", "value", pl.struct("ci_low", "ci_high").map_elements(
            lambda c: _interval(c["ci_low"], c["ci_high"]), return_dtype=pl.Utf8).alias("ci_95"), "n", "status")
    out.append('<h3 class="sub">Do people and students agree? Ratings, exclusions</h3>')
    out.append(table_html(agree, "human_study.csv"))
    out.append("</section>")
    return "".join(out)


def nav_html() -> str:
    return "".join(f'<a href="#{html.escape(i)}">{html.escape(label)}</a>' for i, label in NAV)


CHANGES_COLUMNS = ("teacher", "dataset", "metric", "change", "old", "new", "delta", "delta_ci", "outside_ci",
                   "rank_old", "rank_new", "cause")
"""diff.csv's columns as the page shows them: the interval of the difference in one cell."""
CHANGES_SHOWN = 200
"""Rows of diff.csv the page shows (changes outside the interval first); the file has every row."""


def changes_html(report: Report) -> str:
    """"Changes since the last run": the headline and the rows of diff.csv (`runs.diff`)."""
    import polars as pl

    e = html.escape
    out = ['<section id="changes"><h2>Changes since the last run</h2>']
    ch = report.changes
    if ch is None:
        out.append('<p class="empty" data-file="diff.csv">not run: no run records read (`legival run` records '
                   "one per run; `legival diff --db DB` compares two)</p></section>")
        return "".join(out)
    out.append(f'<p class="note">{e(headline(ch))}. delta = new - old; outside_ci: the 95% bootstrap interval '
               "of the difference (resampling problems, both runs' replicates) excludes 0; dataset 'all' = teacher "
               "level. File: <code>diff.csv</code>.</p>")
    if ch.new is not None and ch.new.run.get("ui_url"):
        url = str(ch.new.run["ui_url"])
        if url.startswith(("http://", "https://")):
            out.append(f'<p class="note">This run in Prefect: <a href="{e(url)}">{e(url)}</a></p>')
    interval = pl.when(pl.col("diff_ci_low").is_not_null()).then(pl.format(
        "[{}, {}]", pl.col("diff_ci_low").round_sig_figs(4), pl.col("diff_ci_high").round_sig_figs(4)))
    frame = ch.frame.with_columns(interval.alias("delta_ci")).select(CHANGES_COLUMNS)
    if frame.height:
        out.append(table_html(frame.head(CHANGES_SHOWN), "diff.csv"))
        if frame.height > CHANGES_SHOWN:
            out.append(f'<p class="note">{frame.height - CHANGES_SHOWN} more rows in diff.csv</p>')
    elif ch.old is not None:
        out.append('<p class="empty" data-file="diff.csv">no change: every value and rank equals the previous run\'s</p>')
    out.append("</section>")
    return "".join(out)
