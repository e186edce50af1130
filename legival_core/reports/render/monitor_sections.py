"""The dashboard's monitorability sections: hint interventions scored with g-mean² beside the paper's
supervisor F1 and the monitors' agreement (docs/monitorability.md), and early answering beside the
students' transfer curves (docs/transfer.md "Early answering"). Static HTML, every string escaped."""

from __future__ import annotations

import base64
import html
from pathlib import Path
from typing import TYPE_CHECKING

from legival_core.reports.compute.early_answering import EARLY, early_answering_of
from legival_core.reports.compute.monitor_agreement import monitor_agreement_of
from legival_core.reports.compute.monitorability import monitorability_of
from legival_core.reports.render.html_table import empty_html, table_html

if TYPE_CHECKING:
    from legival_core.reports.render.bundle import Report


def monitorability_html(report: Report) -> str:
    """"Monitorability": g-mean² per teacher x cue x monitor x scope with its bootstrap spread and Chen et
    al.'s verbalisation rate, the paper's F1 table beside it, and the Spearman of FOTU with g-mean²
    across teachers (monitorability.csv, docs/monitorability.md)."""
    import polars as pl

    table = monitorability_of(report.data)
    out = ['<section id="pf-monitorability" class="paper"><h2>Monitorability: hint interventions and g-mean\u00b2</h2>',
           '<p class="note">Each teacher answered without a hint and with each cue (Chen et al. 2025) pointing to a '
           "wrong target; a monitor says whether the reasoning reveals using the hint. g-mean\u00b2 = TPR x TNR "
           "(Guan et al. 2025) on eligible instances (the hint moved the answer), cross-fit bootstrap: mean and "
           "std over draws. Beside it, the paper's supervisor F1 (a different question: flagging wrong traces). "
           "File: <code>monitorability.csv</code> (docs/monitorability.md).</p>"]
    g = table.filter(pl.col("section") == "gmean2")
    if g.height == 0 or g["teacher"].is_null().all():  # nothing stored: the row that names the command
        out.append(empty_html("monitorability.csv", str(table["status"][0])) + "</section>")
        return "".join(out)
    out.append(table_html(g.select("teacher", "cue", "monitor", "scope", "n_instances", "eligible_fraction_mean",
                                    "gmean2_mean", "gmean2_ci_low", "gmean2_ci_high", "gmean2_std", "TPR_mean",
                                    "TNR_mean", "verbalisation_rate", "unparsed", "missing_arm", "status"),
                           "monitorability.csv"))
    f1 = [c for c in ("monitor_precision", "monitor_recall", "monitor_f1", "gmean2", "verbalisation_rate")
          if c in report.data.teacher_metrics.columns]
    out.append('<h3 class="sub">Beside the paper\'s table: supervisor F1 and g-mean\u00b2 per teacher</h3>')
    out.append(table_html(report.data.teacher_metrics.select("teacher", *f1), "teacher_metrics.csv"))
    corr = table.filter(pl.col("section") == "spearman_fotu")
    if corr.height:
        out.append('<h3 class="sub">Is a more legible teacher more monitorable? Spearman of FOTU with g-mean\u00b2</h3>')
        out.append(table_html(corr.select("cue", "monitor", "scope", "rho", "p_value", "n", "status"),
                               "monitorability.csv"))
    agree = monitor_agreement_of(report.data)
    out.append('<h3 class="sub">Do the monitors agree? Cohen\'s kappa beside Gwet\'s AC1 (AC1 survives saturated '
               "verdicts)</h3>")
    if agree["monitor_a"].is_null().all():
        out.append(empty_html("agreement.csv", str(agree["status"][0])))
    else:
        out.append(table_html(agree.select("monitor_a", "monitor_b", "teacher", "cue", "scope", "n", "raw_agreement",
                                            "kappa", "kappa_ci_low", "kappa_ci_high", "gwet_ac1", "gwet_ac1_ci_low",
                                            "gwet_ac1_ci_high", "saturated", "status"), "agreement.csv"))
    out.append("</section>")
    return "".join(out)


def early_answering_html(report: Report, image_dir: Path | None) -> str:
    """"Early answering": per (teacher, dataset) with an early-answer reader, the area under its curve
    beside each model student's FOTU, and the figure of the curves (early_answering.csv / .png)."""
    import polars as pl

    e = html.escape
    table = early_answering_of(report.data)
    out = ['<section id="pf-early" class="paper"><h2>Early answering: the reasoning cut short, answered at once'
           "</h2>",
           '<p class="note">Lanham et al. 2023: the teacher\'s reasoning cut at each depth k of the transfer grid and '
           "the answer forced at once (no continuation) by an early-answer reader (<code>early_answer</code>: with "
           "<code>transfer.early_answering</code>, the teacher's own model); "
           "beside it each weaker student that continues the same prefixes (<code>transfer</code>). area = (1/B) "
           "sum_b f(b), the FOTU formula on each curve. A high early-answering area at small k: the answer did not "
           "need the rest of the reasoning. Files: <code>early_answering.csv</code>, <code>early_answering.png</code> "
           "(docs/transfer.md).</p>"]
    area = table.filter(pl.col("section") == "area")
    if area["teacher"].is_null().all():
        out.append(empty_html("early_answering.csv", str(table["status"][0])) + "</section>")
        return "".join(out)
    png = image_dir / "early_answering.png" if image_dir is not None else None
    if png is not None and png.exists():
        uri = "data:image/png;base64," + base64.b64encode(png.read_bytes()).decode("ascii")
        out.append('<figure class="paperfig"><img alt="Early answering beside the transfer curves" '
                   f'data-name="early_answering.png" src="{uri}"></figure>')
    out.append(table_html(area.select("teacher", "dataset", "kind", "reader", pl.col("value").alias("area"), "n",
                                      "status"), "early_answering.csv"))
    out.append(f'<p class="note">{e(str(area.filter(pl.col("kind") == EARLY).height))} early-answer curve(s); '
               "the per-bin values are the file's <code>curve</code> rows.</p></section>")
    return "".join(out)
