"""The gCoT text-quality metrics (SPEC section 6) and the dimension scores built from them.

`METRIC_GROUPS` is the one list of what `legival quality` computes: a group (what `--metrics` takes)
is computed by one pass of the quality stage and writes the rows named here. Every metric is
registered with its gCoT dimension (`group`) and direction; the report takes the teacher-level mean
of each, min-max normalises the dimension members across teachers (`<metric>_norm`, inverted where
lower is better), averages them into `dim_<dimension>` and those into the Global Index
(`legival_core.quality.dimensions`). Text-quality columns exist per teacher only and are not ranked
(except the Global Index): they are descriptive scores next to the paper's metrics."""

from __future__ import annotations

from legival_core.metrics.base import Direction, metric

METRIC_GROUPS: dict[str, tuple[str, ...]] = {
    "clarity": ("clarity_clx", "clarity_rd", "clarity_se", "clarity_dc", "clarity_ss"),
    "cohesion": ("cohesion", "cohesion_band_ratio"),
    "coherence_momentum": ("coherence_momentum",),
    "cross_encoder": ("cross_encoder",),
    "nli": ("nli_q2s_mean", "nli_q2s_max", "nli_intra", "nli_support"),
    "alignscore": ("alignscore_imp", "alignscore_support"),
    "factcc": ("factcc",),
    "perplexity": ("perplexity",),
    "bertscore": ("bertscore_f1",),
    "bleurt": ("bleurt",),
    "z3": ("z3_acs", "z3_fas0", "z3_jss", "z3_rcr"),
}
"""Group name -> the metric rows it writes; the first one keys "missing" in the quality stage."""

QUALITY_METRICS: tuple[str, ...] = tuple(m for ms in METRIC_GROUPS.values() for m in ms)

# name: (unit, direction, gCoT dimension or None, description)
_INFO: dict[str, tuple[str, Direction | None, str | None, str]] = {
    "clarity_clx": ("score", "higher", "clarity", "clarity CLX = mean(RD, SE, DC, SS_lite)"),
    "clarity_rd": ("score", "higher", None, "readability (Flesch reading ease, scaled)"),
    "clarity_se": ("score", "higher", None, "structural explicitness"),
    "clarity_dc": ("score", "higher", None, "discourse connectives"),
    "clarity_ss": ("score", "higher", None, "sentence simplicity (lite)"),
    "cohesion": ("score", "higher", "coherence", "embedding cohesion of adjacent steps"),
    "cohesion_band_ratio": ("fraction", "higher", None, "share of adjacent steps in the cohesion band"),
    "coherence_momentum": ("probability", "higher", "coherence", "coherence-momentum model score"),
    "cross_encoder": ("score", "higher", "coherence", "question-trace cross-encoder score"),
    "perplexity": ("perplexity", "lower", "coherence", "perplexity under a small causal LM"),
    "nli_q2s_mean": ("score", "higher", "consistency", "1 - mean NLI contradiction of question vs steps"),
    "nli_q2s_max": ("score", "higher", None, "1 - max NLI contradiction of question vs steps"),
    "nli_intra": ("score", "higher", "consistency", "1 - NLI contradiction between nearby steps"),
    "nli_support": ("score", "higher", None, "NLI support of the trace by the question"),
    "alignscore_imp": ("score", "higher", "consistency", "AlignScore S_imp: the trace implies the response"),
    "alignscore_support": ("score", "higher", None, "AlignScore S_support: the question supports the trace"),
    "factcc": ("probability", "higher", "consistency", "FactCC consistency of the answer with the trace"),
    "bertscore_f1": ("score", "higher", "informativeness", "BERTScore F1 of answer vs trace (baseline-rescaled)"),
    "bleurt": ("score", "higher", "informativeness", "BLEURT of answer vs trace"),
    "z3_acs": ("fraction", "higher", "consistency", "Z3 answer-consistency score of the extracted IR"),
    "z3_fas0": ("fraction", "higher", "consistency", "Z3 final-answer support without shortcuts"),
    "z3_jss": ("fraction", "higher", None, "Z3 justification set size (FAS0 = 1 traces only)"),
    "z3_rcr": ("fraction", "lower", None, "Z3 redundant constraint ratio (FAS0 = 1 traces only)"),
}

_SECTION = "SPEC §6 (gCoT)"

for _order, _name in enumerate(QUALITY_METRICS):
    _unit, _dir, _dim, _desc = _INFO[_name]
    metric(_name, unit=_unit, direction=_dir, section=_SECTION, stage="quality", source="quality", level="trace",
           order=600 + _order, in_teacher_dataset=False, rank=False, group=_dim, description=_desc)

metric("z3_extraction_rate", unit="fraction", direction="higher", section=_SECTION, stage="quality",
       source="quality", level="teacher", order=700, in_teacher_dataset=False, rank=False,
       description="share of GSM8K traces whose arithmetic chain the IR extractor found")
DIMENSIONS: dict[str, tuple[str, ...]] = {}
for _name in QUALITY_METRICS:
    _dim = _INFO[_name][2]
    if _dim is not None:
        DIMENSIONS.setdefault(_dim, ())
        DIMENSIONS[_dim] += (_name,)
        metric(f"{_name}_norm", unit="score", direction="higher", section=_SECTION, stage="quality",
               source="quality", level="teacher", order=710 + QUALITY_METRICS.index(_name), in_teacher_dataset=False,
               rank=False, description=f"{_name} min-max normalised across teachers (1 = best)")
for _i, _dim in enumerate(DIMENSIONS):
    metric(f"dim_{_dim}", unit="score", direction="higher", section=_SECTION, stage="quality", source="quality",
           level="teacher", order=760 + _i, in_teacher_dataset=False, rank=False,
           description=f"gCoT {_dim} dimension: mean of its normalised metrics")
metric("global_index", unit="score", direction="higher", section=_SECTION, stage="quality", source="quality",
       level="teacher", order=770, in_teacher_dataset=False,
       description="gCoT Global Index: mean of the dimension scores present")
metric("n_dimensions", unit="count", direction=None, section=_SECTION, stage="quality", source="quality",
       level="teacher", order=780, in_teacher_dataset=False, correlate=False,
       description="how many dimensions the Global Index rests on (a count: not correlated)")
LOWER_IS_BETTER: frozenset[str] = frozenset(n for n in QUALITY_METRICS if _INFO[n][1] == "lower")


def resolve_groups(metrics: list[str] | tuple[str, ...] | None) -> list[str]:
    """Group names from `--metrics` (group names or metric names); every group when None/empty."""
    if not metrics:
        return list(METRIC_GROUPS)
    out: list[str] = []
    for name in metrics:
        key = name.strip().lower()
        group = key if key in METRIC_GROUPS else next((g for g, ms in METRIC_GROUPS.items() if key in ms), None)
        if group is None:
            raise ValueError(f"unknown quality metric {name!r}; known: {', '.join(METRIC_GROUPS)} "
                             f"(or one of {', '.join(QUALITY_METRICS)})")
        if group not in out:
            out.append(group)
    return out
