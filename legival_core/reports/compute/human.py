"""The human student (issue 42 part 5, docs/study.md "Analysis"): people as one more student of the
report, and the study's own table, `human_study.csv`.

`with_human` appends the student `human` (pooled over every study and participant of the store,
attention checks and excluded participants left out) to the students and its depth rows to the depths
frame, so that curves, FOTU, SOTU, RR and every per-student file carry it through the report's own code;
its depths are open-ended (`transfer.utility.transfer_table`): a study asks a few fractions, never k = 0.

`human_study_table` is the study's table, one schema whatever is stored (`section`, `teacher`, `student`,
`metric`, `value`, `ci_low`, `ci_high`, `n`, `n_answers`, `n_participants`, `status`):
- `teacher`: human FOTU, SOTU and regression_rate per teacher (the report's values: mean over the
  teacher's datasets), with 95% intervals from a TWO-WAY bootstrap: participants and problems are
  resampled independently and an answer counts with the product of its participant's and its problem's
  draw counts (a trace's mean correctness at a depth is the weighted mean of its answers; a trace counts
  in its teacher's means with its problem's draw count);
- `spearman_fotu`: per model student, Spearman's rho of teacher FOTU (human vs the student) across
  teachers, with a bootstrap interval over problems (both students' FOTU recomputed on each resample);
- `kappa`: per model student, the agreement of the human (mean correctness >= 0.5 at a (trace, k), a tie
  counted correct) and the student (y >= 0.5) over the (trace, k) both answered (`legival_core.agreement`):
  `cohen_kappa`, `raw_agreement` and `gwet_ac1` with 95% intervals over items resampled (the report's
  `resamples` and `seed`), `prevalence_correct_human`, `prevalence_correct_student` and `saturated` (1
  when 70% of either side's labels are one label: kappa then collapses while AC1 stays near raw agreement);
- `ratings`: Spearman of the mean 1-5 rating per teacher against human FOTU per teacher, and of the
  rating against correctness over the rated answers;
- `participants`: participants with answers, excluded ones (more than `max_attention_failures`
  attention checks answered wrong: `study.settings.StudyAnalysis`), answers used.
"""

from __future__ import annotations

import math
import warnings
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from legival_core.agreement import agreement, bootstrap_ci
from legival_core.datasets.base import current_graders
from legival_core.intervals import percentile_interval
from legival_core.registry import is_registered
from legival_core.reports.compute.aggregate import HUMAN
from legival_core.reports.compute.data import ReportConfig, ReportData
from legival_core.run_config import default_of
from legival_core.store import Store, study_grades
from legival_core.store import study as study_reads
from legival_core.study.settings import StudyAnalysis
from legival_core.transfer.utility import transfer_table

if TYPE_CHECKING:
    import numpy as np
    import polars as pl

NOT_CREATED = "not run: legival study create --db DB"
NOT_GRADED = "not run: legival study grade --db DB"
COMPUTED = "computed"
COLUMNS = ("section", "teacher", "student", "metric", "value", "ci_low", "ci_high", "n", "n_answers",
           "n_participants", "status")
TEACHER_METRICS = ("fotu", "sotu", "regression_rate")


@dataclass(frozen=True, slots=True)
class HumanInputs:
    """What the report reads of the studies: every answer (`store.study_grades.human_answers`, plus `tix`
    where its trace is a transfer trace) and the human depth rows (`store.study_grades.human_depths`)."""

    answers: pl.DataFrame
    depths: pl.DataFrame
    has_study: bool


def read_human(store: Store, transfer_traces: pl.DataFrame, max_failures: int | None = None) -> HumanInputs:
    """The studies' answers and the human depth rows over `transfer_traces` (trace_id, tix, m)."""
    import polars as pl

    max_failures = default_of(StudyAnalysis, "max_attention_failures") if max_failures is None else max_failures
    has_study = bool(study_reads.study_names(store))
    datasets = [d for d in transfer_traces["dataset"].unique().to_list() if is_registered("dataset", d)] \
        if "dataset" in transfer_traces.columns else []
    stored = study_grades.human_answers(store, current_graders(_study_datasets(store, datasets)), max_failures) \
        if has_study else pl.DataFrame()
    depths = study_grades.human_depths(store, transfer_traces, current_graders(datasets), max_failures)
    if stored.height:
        stored = stored.join(transfer_traces.select("trace_id", "tix", "m"), on="trace_id", how="left")
    return HumanInputs(stored, depths, has_study)


def _study_datasets(store: Store, datasets: list[str]) -> list[str]:
    from legival_core.store import planner

    return sorted({*datasets, *[d for d in planner.stored_datasets(store) if is_registered("dataset", d)]})


def with_human(students: pl.DataFrame, depths: pl.DataFrame, human_depths: pl.DataFrame) -> tuple[
        pl.DataFrame, pl.DataFrame, tuple[int, ...]]:
    """(students, depths, open_ends): the student `human` appended with its depth rows when it has any
    (nothing changes otherwise)."""
    import polars as pl

    if human_depths.height == 0:
        return students, depths, ()
    six = int(students["six"].max()) + 1 if students.height else 0  # type: ignore[arg-type]
    students = pl.concat([students, pl.DataFrame({"six": [six], "student_key": [HUMAN], "student": [HUMAN]},
                                                 schema=students.schema)])
    rows = human_depths.with_columns(pl.lit(six, pl.Int64).alias("six")).select(depths.columns).cast(depths.schema)
    return students, pl.concat([depths, rows]), (six,)


# --- resampling ------------------------------------------------------------------------------------


def resampled_human(used: pl.DataFrame, wp: np.ndarray, wq: np.ndarray, n_bins: int, teachers: list[str]
                    ) -> dict[str, np.ndarray]:
    """Human FOTU, SOTU and RR per teacher (mean over its datasets) on each resample: `wp` (R x P)
    draw counts of the participants `used['pi']` indexes, `wq` (R x Q) of the problems `used['qi']`
    indexes; returns metric -> (R x teachers)."""
    import numpy as np
    import polars as pl
    from scipy import sparse

    r_n = wp.shape[0]
    cells = used.select("tix", "k", "m", "qi", "teacher", "dataset").unique(["tix", "k"], maintain_order=True)
    cells = cells.with_row_index("di")
    di = used.join(cells.select("tix", "k", "di"), on=["tix", "k"])["di"].to_numpy()
    w = wp[:, used["pi"].to_numpy()] * wq[:, used["qi"].to_numpy()]  # R x A
    member = sparse.csr_matrix((np.ones(len(di)), (np.arange(len(di)), di)), shape=(len(di), cells.height))
    num = np.asarray((member.T @ (w * used["correct"].cast(pl.Float64).to_numpy()).T).T)
    den = np.asarray((member.T @ w.T).T)
    rr_, dd = np.nonzero(den > 0)
    tr = pl.DataFrame({"r": rr_, "di": dd}).join(cells, on="di")
    traces = cells.select("tix", "qi", "teacher", "dataset").unique("tix").sort("tix").with_row_index("ti")
    tr = tr.join(traces.select("tix", "ti"), on="tix")
    n_t = traces.height
    depths = pl.DataFrame({"tix": tr["r"].to_numpy().astype(np.int64) * n_t + tr["ti"].to_numpy(), "six": 0,
                           "k": tr["k"], "m": tr["m"], "y": num[rr_, dd] / den[rr_, dd]},
                          schema_overrides={"six": pl.Int64, "k": pl.Int64, "m": pl.Int64})
    pairs = transfer_table(depths, n_bins, (0,)).pairs
    rix = (pairs["tix"].to_numpy() // n_t).astype(np.int64)
    tix = (pairs["tix"].to_numpy() % n_t).astype(np.int64)
    tinfo = traces.to_dict(as_series=False)
    cell_names = sorted({(t, d) for t, d in zip(tinfo["teacher"], tinfo["dataset"], strict=True)})
    cell_of = {c: i for i, c in enumerate(cell_names)}
    ci = np.array([cell_of[(tinfo["teacher"][i], tinfo["dataset"][i])] for i in tix], np.int64)
    weight = wq[rix, np.array(tinfo["qi"], np.int64)[tix]].astype(float)
    n_c = len(cell_names)
    out_cells: dict[str, np.ndarray] = {}
    for metric, col in (("fotu", "fotu"), ("regression_rate", "rr")):
        v = pairs[col].to_numpy().astype(float)
        ok = ~np.isnan(v)
        flat = rix[ok] * n_c + ci[ok]
        s = np.bincount(flat, weights=weight[ok] * v[ok], minlength=r_n * n_c)
        c = np.bincount(flat, weights=weight[ok], minlength=r_n * n_c)
        with np.errstate(invalid="ignore", divide="ignore"):
            out_cells[metric] = (s / c).reshape(r_n, n_c)
    tau = pairs["tau"].to_numpy().astype(float)
    ok = ~np.isnan(tau)
    hist = np.bincount((rix[ok] * n_c + ci[ok]) * (n_bins + 1) + tau[ok].astype(np.int64), weights=weight[ok],
                       minlength=r_n * n_c * (n_bins + 1)).reshape(r_n, n_c, n_bins + 1)
    tot = hist.sum(axis=2, keepdims=True)
    with np.errstate(invalid="ignore", divide="ignore"):
        h = hist / tot
        ent = -np.where(h > 0, h * np.log(np.where(h > 0, h, 1)), 0).sum(axis=2) / math.log(n_bins)
    out_cells["sotu"] = np.where(tot[:, :, 0] > 0, ent + 0.0, np.nan)
    out: dict[str, np.ndarray] = {}
    for metric, vals in out_cells.items():  # teacher = mean over its datasets (undefined ones skipped)
        cols = []
        for t in teachers:
            idx = [i for i, (tt, _d) in enumerate(cell_names) if tt == t]
            with warnings.catch_warnings():  # a resample without the teacher: NaN, left out of the interval
                warnings.simplefilter("ignore", RuntimeWarning)
                cols.append(np.nanmean(vals[:, idx], axis=1) if idx else np.full(r_n, np.nan))
        out[metric] = np.stack(cols, axis=1) if cols else np.empty((r_n, 0))
    return out


def spearman(x: np.ndarray, y: np.ndarray) -> float | None:
    """Spearman's rho (average ranks for ties, then Pearson); None when fewer than 3 pairs or a
    constant side."""
    import numpy as np
    from scipy.stats import rankdata

    ok = ~(np.isnan(x) | np.isnan(y))
    x, y = x[ok], y[ok]
    if len(x) < 3:
        return None
    rx, ry = rankdata(x) - (len(x) + 1) / 2, rankdata(y) - (len(y) + 1) / 2
    d = math.sqrt(float((rx * rx).sum() * (ry * ry).sum()))
    return None if d == 0 else float((rx * ry).sum() / d)


def _draws(rng: Any, r_n: int, n: int) -> np.ndarray:
    import numpy as np

    if n == 0:
        return np.zeros((r_n, 0))
    return rng.multinomial(n, np.full(n, 1 / n), size=r_n).astype(float)


# --- the table ---------------------------------------------------------------------------------------


def _row(section: str, metric: str, status: str, teacher: str | None = None, student: str | None = None,
         value: float | None = None, ci: tuple[float | None, float | None] = (None, None), n: int | None = None,
         n_answers: int | None = None, n_participants: int | None = None) -> dict[str, Any]:
    return {"section": section, "teacher": teacher, "student": student, "metric": metric, "value": value,
            "ci_low": ci[0], "ci_high": ci[1], "n": n, "n_answers": n_answers, "n_participants": n_participants,
            "status": status}


def _frame(rows: list[dict[str, Any]]) -> pl.DataFrame:
    import polars as pl

    schema = {"section": pl.Utf8, "teacher": pl.Utf8, "student": pl.Utf8, "metric": pl.Utf8, "value": pl.Float64,
              "ci_low": pl.Float64, "ci_high": pl.Float64, "n": pl.Int64, "n_answers": pl.Int64,
              "n_participants": pl.Int64, "status": pl.Utf8}
    out = pl.DataFrame(rows, schema=schema, orient="row") if rows else pl.DataFrame(schema=schema)
    # 12 digits: a kappa or rho of exactly 0 computed as -3.3e-16 reads 0 (and + 0.0 makes -0.0 plain 0.0)
    return out.with_columns((pl.col(c).round(12) + 0.0).alias(c) for c in ("value", "ci_low", "ci_high"))


def empty_human_study(status: str = NOT_CREATED) -> pl.DataFrame:
    """The table when nothing can be computed: one `participants` row saying why."""
    return _frame([_row("participants", "participants", status)])


def _nan_none(v: Any) -> float | None:
    return None if v is None or (isinstance(v, float) and math.isnan(v)) else float(v)


def _ci(samples: np.ndarray) -> list[tuple[float | None, float | None]]:
    import numpy as np

    if samples.size == 0 or samples.shape[0] == 0:
        return [(None, None)] * (samples.shape[1] if samples.ndim == 2 else 0)
    lo, hi = percentile_interval(samples)
    return [(_nan_none(a), _nan_none(b)) for a, b in zip(np.atleast_1d(lo), np.atleast_1d(hi), strict=True)]


def human_study_table(human: HumanInputs, model_depths: pl.DataFrame, data: ReportData,
                      config: ReportConfig | None = None) -> pl.DataFrame:
    """`human_study.csv` (module docstring) from the studies' answers, the model students' depth rows at
    the human's (tix, k) (`model_depths`: tix, six, k, y) and the report's tables."""
    import numpy as np
    import polars as pl

    config = config or data.config
    if not human.has_study:
        return empty_human_study(NOT_CREATED)
    a = human.answers
    if a.height == 0 or a["correct"].is_null().all():
        return empty_human_study(NOT_GRADED if a.height else "too few answers: none stored yet "
                                 "(legival study serve --db DB --name N)")
    graded = a.filter(pl.col("correct").is_not_null())
    people = graded.select("study", "code", "excluded").unique()
    excluded = int(people["excluded"].sum())
    used = graded.filter((pl.col("kind") == "item") & ~pl.col("excluded") & pl.col("tix").is_not_null()
                         & (pl.col("m") == pl.col("item_m")))
    rows = [_row("participants", "participants", COMPUTED, value=float(people.height), n=people.height),
            _row("participants", "excluded", COMPUTED, value=float(excluded), n=excluded),
            _row("participants", "answers_used", COMPUTED, value=float(used.height), n=used.height)]
    if a["correct"].is_null().any():
        rows.append(_row("participants", "answers_ungraded", NOT_GRADED,
                         value=float(a["correct"].is_null().sum()), n=int(a["correct"].is_null().sum())))
    if used.height == 0:
        return _frame(rows)
    used = used.with_columns(
        (pl.col("study") + "\x00" + pl.col("code")).rank("dense").cast(pl.Int64).sub(1).alias("pi"),
        (pl.col("dataset") + "\x00" + pl.col("problem_id")).rank("dense").cast(pl.Int64).sub(1).alias("qi"))
    teachers = sorted(used["teacher"].unique().to_list())
    n_p, n_q = int(used["pi"].max()) + 1, int(used["qi"].max()) + 1  # type: ignore[arg-type]
    rng = np.random.default_rng(config.seed)
    r_n = config.resamples
    wp, wq = _draws(rng, r_n, n_p), _draws(rng, r_n, n_q)
    two_way = resampled_human(used, wp, wq, config.n_bins, teachers) if r_n else {}
    st = data.aggregates.by_student
    point = (st.filter(pl.col("student") == HUMAN).group_by("teacher")
             .agg(pl.col(c).mean() for c in TEACHER_METRICS))
    point_of = {r["teacher"]: r for r in point.iter_rows(named=True)}
    per_t = used.group_by("teacher").agg(pl.len().alias("n_answers"),
                                         (pl.col("study") + "\x00" + pl.col("code")).n_unique().alias("n_participants"),
                                         pl.col("tix").n_unique().alias("n_traces"))
    counts = {r["teacher"]: r for r in per_t.iter_rows(named=True)}
    for metric in TEACHER_METRICS:
        cis = _ci(two_way[metric]) if two_way else [(None, None)] * len(teachers)
        for t, ci in zip(teachers, cis, strict=True):
            v = _nan_none(point_of.get(t, {}).get(metric))
            c = counts[t]
            rows.append(_row("teacher", metric, COMPUTED if v is not None else "too few answers: undefined",
                             t, HUMAN, v, ci, c["n_traces"], c["n_answers"], c["n_participants"]))
    rows += _agreement_rows(used, model_depths, data, teachers, point_of, rng, config)
    return _frame(rows)


def _agreement_rows(used: pl.DataFrame, model_depths: pl.DataFrame, data: ReportData, teachers: list[str],
                    point_of: dict[str, dict[str, Any]], rng: Any, config: ReportConfig) -> list[dict[str, Any]]:
    """The spearman_fotu, kappa and ratings rows (module docstring)."""
    import numpy as np
    import polars as pl

    rows: list[dict[str, Any]] = []
    h_fotu = np.array([_nan_none(point_of.get(t, {}).get("fotu")) or np.nan for t in teachers])
    models = data.students.filter(pl.col("student") != HUMAN)
    pairs = data.transfer.pairs.join(data.traces.select("tix", "teacher", "dataset", "problem_id"), on="tix")
    problems = used.select("dataset", "problem_id", "qi").unique()
    r_n = config.resamples
    wq = _draws(rng, r_n, int(problems["qi"].max()) + 1)  # type: ignore[arg-type]
    ones = np.ones((r_n, int(used["pi"].max()) + 1))  # type: ignore[arg-type]
    h_boot = resampled_human(used, ones, wq, config.n_bins, teachers)["fotu"] if r_n else None
    for s in models.iter_rows(named=True):
        mp = pairs.filter((pl.col("six") == s["six"]) & pl.col("fotu").is_not_null()).join(
            problems, on=["dataset", "problem_id"], how="inner")  # the study's problems: a paired comparison
        cells = mp.group_by("teacher", "dataset").agg(pl.col("fotu").mean()).group_by("teacher").agg(
            pl.col("fotu").mean())
        of = dict(cells.iter_rows())
        m_fotu = np.array([of.get(t, np.nan) for t in teachers], float)
        rho = spearman(h_fotu, m_fotu)
        ci: tuple[float | None, float | None] = (None, None)
        if h_boot is not None and rho is not None:
            mb = _student_boot(mp, wq, teachers)
            rhos = np.array([spearman(h_boot[i], mb[i]) or np.nan for i in range(r_n)])
            ci = _ci(rhos[:, None])[0]
        n_t = int((~np.isnan(h_fotu) & ~np.isnan(m_fotu)).sum())
        rows.append(_row("spearman_fotu", "spearman_teacher_fotu", COMPUTED if rho is not None else
                         "too few teachers: needs 3 with a FOTU on both sides", None, s["student"], rho, ci, n_t))
        hy = used.group_by("tix", "k").agg(pl.col("correct").cast(pl.Float64).mean().alias("h"))
        both = hy.join(model_depths.filter((pl.col("six") == s["six"]) & pl.col("y").is_not_null()),
                       on=["tix", "k"], how="inner")
        rows += _kappa_rows(both["h"].to_numpy() >= 0.5, both["y"].to_numpy() >= 0.5, s["student"], config)
    rated = used.filter(pl.col("rating").is_not_null())
    by_t = dict(rated.group_by("teacher").agg(pl.col("rating").mean()).iter_rows())
    mean_rating = np.array([by_t.get(t, np.nan) for t in teachers], float)
    rho_t = spearman(mean_rating, h_fotu)
    rows.append(_row("ratings", "spearman_rating_fotu", COMPUTED if rho_t is not None else
                     "too few teachers: needs 3 with ratings and a FOTU", None, HUMAN, rho_t,
                     n=int((~np.isnan(mean_rating) & ~np.isnan(h_fotu)).sum()), n_answers=rated.height))
    rho_i = spearman(rated["rating"].cast(pl.Float64).to_numpy(), rated["correct"].cast(pl.Float64).to_numpy())
    rows.append(_row("ratings", "spearman_rating_correct", COMPUTED if rho_i is not None else
                     "too few rated answers, or constant ratings or correctness", None, HUMAN, rho_i,
                     n=rated.height, n_answers=rated.height))
    return rows


LABELS = (False, True)
"""Wrong, correct: the scale of the human's and a student's label on an item."""


def _kappa_rows(human: np.ndarray, student: np.ndarray, name: str, config: ReportConfig) -> list[dict[str, Any]]:
    """The `kappa` section of one model student (module docstring), intervals over items."""
    h, y = human.tolist(), student.tolist()
    g = agreement(h, y, LABELS)
    ci = bootstrap_ci(h, y, LABELS, resamples=config.resamples, seed=config.seed)
    n = g.n
    few = "too few items: none shared"

    def status(v: float | None, note: str | None) -> str:
        return COMPUTED if v is not None else f"too few items: {note}" if n else few

    sat = None if not n else float(g.saturated)
    return [_row("kappa", "cohen_kappa", status(g.kappa, g.kappa_note), None, name, g.kappa, ci.kappa, n),
            _row("kappa", "raw_agreement", status(g.raw, None), None, name, g.raw, ci.raw, n),
            _row("kappa", "gwet_ac1", status(g.gwet, g.gwet_note), None, name, g.gwet, ci.gwet, n),
            _row("kappa", "prevalence_correct_human", status(g.raw, None), None, name,
                 g.prevalence_a[1] if n else None, n=n),
            _row("kappa", "prevalence_correct_student", status(g.raw, None), None, name,
                 g.prevalence_b[1] if n else None, n=n),
            _row("kappa", "saturated", status(sat, None), None, name, sat, n=n)]


def _student_boot(mp: pl.DataFrame, wq: np.ndarray, teachers: list[str]) -> np.ndarray:
    """A model student's teacher FOTU (mean over datasets of the mean over traces) on each problem
    resample (`wq`, R x Q over `mp['qi']`), restricted to the study's problems: R x teachers."""
    import numpy as np

    r_n = wq.shape[0]
    out = np.full((r_n, len(teachers)), np.nan)
    for j, t in enumerate(teachers):
        sub = mp.filter(mp["teacher"] == t)
        per_d = []
        for d in sub["dataset"].unique().to_list():
            x = sub.filter(sub["dataset"] == d)
            w = wq[:, x["qi"].to_numpy()]
            with np.errstate(invalid="ignore", divide="ignore"):
                per_d.append((w * x["fotu"].to_numpy()).sum(axis=1) / w.sum(axis=1))
        if per_d:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore", RuntimeWarning)
                out[:, j] = np.nanmean(np.stack(per_d, axis=1), axis=1)
    return out


def human_study_of(data: ReportData) -> pl.DataFrame:
    """The human study table of a report (the not-run table for tables assembled without a store)."""
    table = getattr(data, "human_study", None)
    return table if table is not None else empty_human_study(NOT_CREATED)
