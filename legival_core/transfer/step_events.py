"""Step events (issue 41, docs/step_events.md): what a student's correctness does between two consecutive
rollout depths, and what the teacher wrote in between.

For a (trace, student) pair, the observed depths k_0 < k_1 < ... (SPEC section 4: K, a depth is
observed when at least one of its samples is `ok`) cut the trace into segments (k_i, k_{i+1}]. Each
segment is one event: its outcome (`drop`: y falls, `rise`, `flat_correct` / `flat_wrong`: y equal,
at or above 0.5 / below) and the features of the teacher's steps k_i + 1 .. k_{i+1}. The drops are
exactly the regressions the regression rate counts (`utility.transfer_table`'s `rr_count`).

ONE vectorised implementation (`segment_events`): a chunk of traces is a few flat arrays, a segment's
"any flagged step" is a difference of prefix sums and its max r_i one `maximum.reduceat`, so no Python
loop runs per event or per step. The steps' texts are read by two vectorised passes only: the
self-check cue regex (`self_check_flags`, polars' Rust regex over a batch of steps) and the literal
search for the gold answer (`gold_candidates`); the dataset grader's own extraction then runs on the
few steps that hold the gold (`first_stated`).
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from functools import lru_cache
from typing import TYPE_CHECKING

from legival_core.grading.grader import AnswerGrader, is_single_expression
from legival_core.grading.math_equiv import strings_equivalent
from legival_core.grading.normalize import strip_string
from legival_core.grading.numeric import numbers_equal
from legival_core.registry import get, is_registered

if TYPE_CHECKING:
    import numpy as np
    import polars as pl

CODE_VERSION = "2"
"""The step events' code: bump it when an event or feature definition changes (every pair is then
recomputed: the version is part of each pair's inputs key). 2: the `similarity` column."""

OUTCOMES = ("drop", "rise", "flat_correct", "flat_wrong")
FLAT_CORRECT_AT = 0.5
"""A flat segment is `flat_correct` when its (equal) y is at least this, else `flat_wrong`."""

SELF_CHECK_CUES: tuple[str, ...] = (
    r"let me (?:double[- ]?)?(?:check|verify)",
    r"let'?s (?:double[- ]?)?(?:check|verify)",
    r"double[- ]?check",
    r"verif(?:y|ies|ying|ied|ication)",
    r"make sure",
    r"sanity[- ]check",
    r"plug(?:s|ged|ging)? (?:\S+ ){0,3}?back",
    r"substitut(?:e|es|ed|ing) (?:\S+ ){0,3}?back",
    r"confirm(?:s|ed|ing|ation)?",
)
"""The self-check cues, the one list (case-insensitive, each starting at a word boundary): a step
holds a self-check when one of them occurs anywhere in it."""
SELF_CHECK_PATTERN = r"(?i)\b(?:" + "|".join(SELF_CHECK_CUES) + ")"
"""`SELF_CHECK_CUES` as one regex, in the syntax both Python's `re` and polars' Rust regex read."""

EVENT_COLUMNS = ("trace_id", "student_key", "k_start", "k_end", "m", "outcome", "y_start", "y_end", "n_steps",
                 "tokens_added", "position", "backtracking", "backtracking_method", "max_cos", "answer_stated",
                 "self_check", "similarity")


def event_schema() -> dict[str, pl.DataType]:
    import polars as pl

    return {"trace_id": pl.Utf8(), "student_key": pl.Utf8(), "k_start": pl.Int32(), "k_end": pl.Int32(),
            "m": pl.Int32(), "outcome": pl.Utf8(), "y_start": pl.Float64(), "y_end": pl.Float64(),
            "n_steps": pl.Int32(), "tokens_added": pl.Int32(), "position": pl.Float64(),
            "backtracking": pl.Boolean(), "backtracking_method": pl.Utf8(), "max_cos": pl.Float64(),
            "answer_stated": pl.Boolean(), "self_check": pl.Boolean(), "similarity": pl.Boolean()}


# --------------------------------------------------------------------------- the teacher's answer stated


@lru_cache(maxsize=65536)
def gold_forms(gold: str) -> tuple[str, ...]:
    """The surface forms under which a step may state `gold`: as given, Hendrycks-normalised
    (`strip_string`: `\\dfrac` -> `\\frac`, `0.5` -> `\\frac{1}{2}`...), an integer of more than three
    digits also with thousands separators (`1,800`), a `\\frac` also as `\\dfrac` / `\\tfrac`.
    Longest first, so that a regex alternation prefers the longest."""
    g = gold.strip()
    if not g:
        return ()
    forms = {g}
    with _quiet():
        s = strip_string(g)
    if s:
        forms.add(s)
    for f in list(forms):
        if re.fullmatch(r"-?\d{4,}", f):
            forms.add(f"{int(f):,}")
        if "\\frac" in f:
            forms |= {f.replace("\\frac", "\\dfrac"), f.replace("\\frac", "\\tfrac")}
    return tuple(sorted(forms, key=lambda x: (-len(x), x)))


class _quiet:
    """`strip_string` on a gold that is not MATH-shaped may raise on odd input: keep the raw form then."""

    def __enter__(self) -> None:
        return None

    def __exit__(self, typ: object, exc: object, tb: object) -> bool:
        return isinstance(exc, ValueError | IndexError | RecursionError)


def cheap_grader(dataset: str) -> AnswerGrader | None:
    """The dataset's grader when it offers a cheap extraction (an `AnswerGrader`: a finder of answer
    spans), else None: then `answer_stated` is null for its traces."""
    if not is_registered("grader", dataset):
        return None
    grader = get("grader", dataset)
    return grader if isinstance(grader, AnswerGrader) else None


def states_gold(grader: AnswerGrader, step: str, gold: str) -> bool:
    """Whether one step's own answer, read as the dataset's grader reads a teacher's answer (its finder
    on the step text alone, the teacher rule: the last answer of the best tier, so a GSM8K step's last
    number, a MATH step's box or "the answer is" phrase, a GPQA step's boxed or stated letter), equals
    the gold under the grader's cheap comparison: equal numbers, or equal Hendrycks-normalised strings
    (never math-verify)."""
    value = grader.extract(step, "", "teacher")
    if value is None:
        return False
    with _quiet():
        return numbers_equal(value, gold) or strings_equivalent(value, gold)
    return False


@lru_cache(maxsize=4096)
def _bounded(forms: tuple[str, ...]) -> re.Pattern[str]:
    alt = "|".join(re.escape(f) for f in forms)
    return re.compile(r"(?<![0-9A-Za-z])(?:" + alt + r")(?![0-9A-Za-z])")


def answer_defined(row_dataset: Sequence[str], row_gold: Sequence[str | None]) -> np.ndarray:
    """Per trace row: whether `answer_stated` is defined: its dataset's grader has a cheap extraction
    (`cheap_grader`) and its gold is one expression (`is_single_expression`: a four-group Connections
    answer cannot be stated in one step)."""
    import numpy as np

    graders = {d: cheap_grader(d) for d in set(row_dataset)}
    return np.array([graders[d] is not None and g is not None and is_single_expression(g)
                     for d, g in zip(row_dataset, row_gold, strict=True)], dtype=bool)


def gold_candidates(step_text: pl.Series, step_row: np.ndarray, row_gold: Sequence[str | None],
                    defined: np.ndarray) -> np.ndarray:
    """Per step: whether one of its trace's `gold_forms` occurs in it as a token (not inside a longer
    number or word), the first condition of stating the gold. One literal search per form over all
    steps at once (polars), then the token boundaries on those few hits. `step_text` (a polars string
    Series) is a step of trace row `step_row`."""
    import numpy as np
    import polars as pl

    hit = np.zeros(len(step_text), bool)
    if not len(step_text) or not defined.any():
        return hit
    forms = [gold_forms(g) if ok and g is not None else () for ok, g in zip(defined, row_gold, strict=True)]
    for j in range(max(len(f) for f in forms)):
        form_j = pl.Series([f[j] if len(f) > j else None for f in forms], dtype=pl.Utf8)
        per_step = form_j.gather(pl.Series(step_row))
        hit |= step_text.str.contains(per_step, literal=True).fill_null(False).to_numpy()  # type: ignore[arg-type]
    for i in np.flatnonzero(hit):
        hit[i] = _bounded(forms[int(step_row[i])]).search(str(step_text[int(i)])) is not None
    return hit


def first_stated(cand_row: np.ndarray, cand_idx: np.ndarray, cand_text: Sequence[str], row_dataset: Sequence[str],
                 row_gold: Sequence[str | None]) -> np.ndarray:
    """Per trace row, the first step that states its gold (0: none), among the candidate steps
    (`gold_candidates`: step `cand_idx[i]` of row `cand_row[i]`, its text): the second condition,
    `states_gold`, the dataset grader's own reading of the step."""
    import numpy as np

    first = np.zeros(len(row_dataset), np.int64)
    graders = {d: cheap_grader(d) for d in set(row_dataset)}
    for row, idx, text in sorted(zip(cand_row.tolist(), cand_idx.tolist(), cand_text, strict=True)):
        grader, gold = graders[row_dataset[row]], row_gold[row]
        if first[row] or grader is None or gold is None:
            continue
        if states_gold(grader, text, gold):
            first[row] = idx
    return first


def stated(step_text: pl.Series, step_row: np.ndarray, step_idx: np.ndarray, row_dataset: Sequence[str],
           row_gold: Sequence[str | None]) -> tuple[np.ndarray, np.ndarray]:
    """`answer_defined` and `first_stated` of some traces from all their steps' texts (the stage splits
    the two halves: the candidates are found where it reads the text, the grader runs on them after).
    A step states the gold when (1) one of its `gold_forms` occurs in it as a token and (2)
    `states_gold`."""
    import numpy as np

    defined = answer_defined(row_dataset, row_gold)
    hit = np.flatnonzero(gold_candidates(step_text, step_row, row_gold, defined))
    texts = [str(step_text[int(i)]) for i in hit]
    return defined, first_stated(step_row[hit], step_idx[hit], texts, row_dataset, row_gold)


def step_cues(texts: Sequence[str], idx: Sequence[int], dataset: str, gold: str | None) -> tuple[set[int], set[int]]:
    """The per-step cues of one trace as its events read them: the steps that state the gold answer (the
    gold occurs as a token and the dataset grader's reading of the step alone equals it) and the steps
    that hold a self-check cue. What `legival step-events --trace` and the dashboard's explorer both flag."""
    import numpy as np
    import polars as pl

    if not texts:
        return set(), set()
    series = pl.Series(list(texts), dtype=pl.Utf8)
    checks = {int(idx[i]) for i in np.flatnonzero(self_check_flags(series)).tolist()}
    defined = answer_defined([dataset], [gold])
    grader = cheap_grader(dataset)
    if not defined[0] or grader is None or gold is None:
        return set(), checks
    hits = gold_candidates(series, np.zeros(len(texts), np.int64), [gold], defined)
    return {int(idx[i]) for i in np.flatnonzero(hits).tolist() if states_gold(grader, texts[i], gold)}, checks


def self_check_flags(step_text: pl.Series) -> np.ndarray:
    """Whether each step (a polars string Series) holds a self-check cue (`SELF_CHECK_PATTERN`), all
    steps in one regex pass."""
    out: np.ndarray = step_text.str.contains(SELF_CHECK_PATTERN).fill_null(False).to_numpy().astype(bool)
    return out


# ------------------------------------------------------------------------------------------ the events


def segment_events(depths: pl.DataFrame, steps: pl.DataFrame, traces: pl.DataFrame) -> pl.DataFrame:
    """The step events of every (trace, student) pair in `depths`, one row per segment (`EVENT_COLUMNS`).

    - `traces`: one row per trace: `tix` (any distinct integers), `trace_id`, `m`, `backtracking_method`
      (null: neither a judge result nor the lexical cues exist for it: `backtracking` is then null),
      `has_similarity` (its r_i are stored for the embedding model: else `max_cos` is null),
      `answer_defined` and `answer_first` (`first_stated`);
    - `steps`: one row per flagged or measured step: `tix`, `idx` (1..m), `backtracking` (flagged by the
      method), `max_cos` (its r_i, null for step 1), `self_check`; steps absent count as unflagged;
    - `depths`: one row per (trace, student, depth): `tix`, `student_key`, `k`, `y` (mean correctness of
      the ok samples; null: not observed, skipped), `prompt_tokens` (null: not counted).

    Per segment (k_start, k_end]: `n_steps` = k_end - k_start; `position` = k_end / m; `tokens_added`
    = the student's prompt tokens at k_end minus at k_start (null if either is missing);
    `backtracking` = a flagged step in the segment; `max_cos` = the max r_i of its steps (null when
    none has one); `answer_stated` = the first step stating the gold is <= k_end (the prefix up to
    k_end states it); `self_check` = a cue in one of its steps; `similarity` = the trace's r_i are stored
    for the stage's embedding model (`has_similarity`: a null `max_cos` then means "no step of the
    segment has an r_i", not "never computed").
    """
    import numpy as np
    import polars as pl

    schema = event_schema()
    d = depths.filter(pl.col("y").is_not_null()).sort("tix", "student_key", "k")
    if d.height < 2 or traces.height == 0:
        return pl.DataFrame(schema=schema)
    tr = traces.sort("tix")
    t_tix = tr["tix"].to_numpy().astype(np.int64)
    m = tr["m"].to_numpy().astype(np.int64)
    if (m < 1).any():
        raise ValueError("a trace taking part in transfer has m >= 1")
    pair = d.select((pl.struct("tix", "student_key").rle_id()).alias("p"))["p"].to_numpy()
    same = pair[1:] == pair[:-1]
    a = np.flatnonzero(same)  # the segment from depth row a to depth row a + 1
    b = a + 1
    dtix = d["tix"].to_numpy().astype(np.int64)
    row = np.searchsorted(t_tix, dtix)
    if (row >= len(t_tix)).any() or (t_tix[np.minimum(row, len(t_tix) - 1)] != dtix).any():
        raise ValueError("every depth's trace must be in `traces`")
    k = d["k"].to_numpy().astype(np.int64)
    y = d["y"].to_numpy().astype(np.float64)
    if ((k < 0) | (k > m[row])).any():
        raise ValueError("rollout depths must satisfy 0 <= k <= m")
    prompt = d["prompt_tokens"].cast(pl.Float64).fill_null(np.nan).to_numpy()
    seg_row = row[a]
    k0, k1 = k[a], k[b]
    y0, y1 = y[a], y[b]

    # steps as one flat array per trace (indices base + 0..m), so a segment is a range base + (k0, k1]
    base = np.concatenate([[0], np.cumsum(m + 1)[:-1]])
    size = int((m + 1).sum())
    bt = np.zeros(size, np.int64)
    sc = np.zeros(size, np.int64)
    cos = np.full(size + 1, -np.inf)  # one sentinel past the end for reduceat
    if steps.height:
        s_tix = steps["tix"].to_numpy().astype(np.int64)
        s_row = np.searchsorted(t_tix, s_tix)
        s_row = np.minimum(s_row, len(t_tix) - 1)
        s_idx = steps["idx"].to_numpy().astype(np.int64)
        keep = (t_tix[s_row] == s_tix) & (s_idx >= 1) & (s_idx <= m[s_row])
        at = base[s_row[keep]] + s_idx[keep]
        bt[at] = steps["backtracking"].fill_null(False).to_numpy()[keep].astype(np.int64)
        sc[at] = steps["self_check"].fill_null(False).to_numpy()[keep].astype(np.int64)
        cos[at] = steps["max_cos"].cast(pl.Float64).fill_null(-np.inf).to_numpy()[keep]
    bt_cum, sc_cum = np.cumsum(bt), np.cumsum(sc)
    lo, hi = base[seg_row] + k0, base[seg_row] + k1
    n_bt = bt_cum[hi] - bt_cum[lo]
    n_sc = sc_cum[hi] - sc_cum[lo]
    bounds = np.empty(2 * len(lo), np.int64)
    bounds[0::2], bounds[1::2] = lo + 1, hi + 1
    seg_cos = np.maximum.reduceat(cos, bounds)[0::2] if len(lo) else np.zeros(0)

    method = tr["backtracking_method"]
    has_method = method.is_not_null().to_numpy()[seg_row]
    has_sim = tr["has_similarity"].fill_null(False).to_numpy()[seg_row]
    answer_defined = tr["answer_defined"].fill_null(False).to_numpy()[seg_row]
    first = tr["answer_first"].fill_null(0).to_numpy().astype(np.int64)[seg_row]
    outcome = np.select([y1 < y0, y1 > y0, y1 >= FLAT_CORRECT_AT], ["drop", "rise", "flat_correct"], "flat_wrong")
    added = prompt[b] - prompt[a]
    out = pl.DataFrame({
        "trace_id": tr["trace_id"].gather(pl.Series(seg_row)),
        "student_key": d["student_key"].gather(pl.Series(a)),
        "k_start": k0, "k_end": k1, "m": m[seg_row], "outcome": outcome, "y_start": y0, "y_end": y1,
        "n_steps": k1 - k0,
        "tokens_added": pl.Series(added, nan_to_null=True),
        "position": k1 / m[seg_row],
        "backtracking": pl.Series(n_bt > 0).set(pl.Series(~has_method), None),
        "backtracking_method": method.gather(pl.Series(seg_row)),
        "max_cos": pl.Series(np.where(has_sim & np.isfinite(seg_cos), seg_cos, np.nan), nan_to_null=True),
        "answer_stated": pl.Series((first >= 1) & (first <= k1)).set(pl.Series(~answer_defined), None),
        "self_check": n_sc > 0,
        "similarity": has_sim.astype(bool),
    })
    return out.cast(schema).select(list(EVENT_COLUMNS))  # type: ignore[arg-type]
