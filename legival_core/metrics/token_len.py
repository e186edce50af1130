"""Token length (SPEC section 3): tiktoken cl100k_base tokens of the reasoning, special-token strings
counted as plain text; reported as the median and mean over the complete traces, and normalised per
problem by the median length of the correct traces of every teacher."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

from legival_core.metrics.base import MetricValue, TraceMetric, TraceText, metric
from legival_core.token_count import ENCODING_NAME, token_lens

if TYPE_CHECKING:
    import polars as pl

    from legival_core.metrics.base import Efficiency

TOKEN_LEN_VERSION = "1"


def compute_token_len(traces: Sequence[TraceText], _cfg: Efficiency) -> list[MetricValue]:
    """One batch call: tiktoken encodes a batch on several threads."""
    return [MetricValue(float(n), ENCODING_NAME) for n in token_lens([t.reasoning for t in traces])]


def with_token_len_norm(traces: pl.DataFrame) -> pl.DataFrame:
    """token_len / median token_len of the correct, complete traces of the same (dataset, problem)
    across all teachers (SPEC section 3); null when that problem has no correct trace. Computed at
    report time, since its denominator changes whenever a teacher is added."""
    import polars as pl

    med = (
        traces.filter(pl.col("correct") & ~pl.col("truncated") & pl.col("token_len").is_not_null())
        .group_by("dataset", "problem_id")
        .agg(pl.col("token_len").median().alias("_correct_median"))
    )
    return traces.join(med, on=["dataset", "problem_id"], how="left").with_columns(
        (pl.col("token_len") / pl.col("_correct_median")).alias("token_len_norm")
    ).drop("_correct_median")


TOKEN_LEN = TraceMetric("token_len", TOKEN_LEN_VERSION, lambda _cfg: {"encoding": ENCODING_NAME},
                        compute_token_len)

metric("token_len_median", unit="tokens", direction="lower", section="SPEC §3", stage="efficiency",
       stored=TOKEN_LEN, aggregate="median", order=110,
       description="median cl100k_base token length of the reasoning (complete traces)")
metric("token_len_mean", unit="tokens", direction="lower", section="SPEC §3", stage="efficiency",
       stored=TOKEN_LEN, aggregate="mean", order=300,
       description="mean cl100k_base token length of the reasoning (complete traces)")
metric("token_len_norm", unit="ratio", direction="lower", section="SPEC §3", stage="efficiency",
       source="derived", derive=with_token_len_norm, inputs=(TOKEN_LEN,), order=310,
       description="token length / the problem's median over every teacher's correct traces")
