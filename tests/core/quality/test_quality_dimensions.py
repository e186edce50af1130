"""Dimension scores, Global Index and Spearman correlations against values worked out by hand."""

from __future__ import annotations

import polars as pl
import pytest

from legival_core.quality.dimensions import dimension_correlations, dimension_scores, spearman
from legival_core.quality.group import dimensions, lower_is_better


def registered(table: pl.DataFrame, group_by: tuple[str, ...] = ()) -> pl.DataFrame:
    """Dimension scores with the registered dimensions (`quality.group`)."""
    return dimension_scores(table, dimensions(), group_by, lower_is_better())


def test_minmax_inversion_dimensions_and_global_index() -> None:
    t = pl.DataFrame({"teacher": ["A", "B", "C"], "cohesion": [0.1, 0.3, 0.2], "perplexity": [10.0, 20.0, 30.0],
                      "clarity_clx": [0.5, 0.5, 0.5]})
    d = registered(t)
    assert d["cohesion_norm"].to_list() == pytest.approx([0.0, 1.0, 0.5])
    assert d["perplexity_norm"].to_list() == pytest.approx([1.0, 0.5, 0.0])  # lower perplexity is better
    assert d["dim_coherence"].to_list() == pytest.approx([0.5, 0.75, 0.25])
    assert d["dim_clarity"].to_list() == pytest.approx([0.5, 0.5, 0.5])  # all equal: no information
    assert d["dim_consistency"].null_count() == 3
    assert d["global_index"].to_list() == pytest.approx([0.5, 0.625, 0.375])
    assert d["n_dimensions"].to_list() == [2, 2, 2]


def test_minmax_runs_within_each_dataset() -> None:
    t = pl.DataFrame({"teacher": ["A", "B", "A", "B"], "dataset": ["g", "g", "m", "m"],
                      "z3_acs": [0.9, 1.0, 0.2, 0.1]})
    d = registered(t, group_by=("dataset",))
    assert d["dim_consistency"].to_list() == pytest.approx([0.0, 1.0, 1.0, 0.0])


def test_spearman_and_correlation_table() -> None:
    assert spearman([1, 2, 3], [3, 2, 1]) == pytest.approx(-1.0)
    assert spearman([1, 2, 3, 4], [1, 3, 2, 4]) == pytest.approx(0.8)
    assert spearman([1, 1, 2], [1, 2, 3]) == pytest.approx(0.8660254)
    assert spearman([1, 2], [1, 2]) is None and spearman([1, 1, 1], [1, 2, 3]) is None
    t = registered(pl.DataFrame({"teacher": list("ABCD"), "cohesion": [0.1, 0.2, 0.3, 0.4],
                               "accuracy": [0.4, 0.3, 0.2, None]}))
    c = dimension_correlations(t, ["accuracy"])
    row = c.filter(pl.col("score") == "dim_coherence").row(0, named=True)
    assert row["rho"] == pytest.approx(-1.0) and row["n"] == 3


def test_dimensions_and_inversion_are_arguments() -> None:
    t = pl.DataFrame({"teacher": ["A", "B", "C"], "x": [1.0, 2.0, 3.0], "y": [0.0, 0.0, 1.0]})
    d = dimension_scores(t, {"one": ("x",), "two": ("y",)}, (), frozenset({"x"}))
    assert d["x_norm"].to_list() == pytest.approx([1.0, 0.5, 0.0])  # inverted because it is listed
    assert d["dim_one"].to_list() == pytest.approx([1.0, 0.5, 0.0])
    assert d["dim_two"].to_list() == pytest.approx([0.0, 0.0, 1.0])
    assert d["global_index"].to_list() == pytest.approx([0.5, 0.25, 0.5])
    assert "dim_coherence" not in d.columns
