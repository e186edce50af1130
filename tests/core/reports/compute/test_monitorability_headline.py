"""A teacher's single g-mean² (`teacher_metrics`) and its coverage status speak of the same rows: the
first monitor's `cot` scope, chosen among every row (computed or not). Before, the number skipped a
first monitor without a computed row and showed the second one's while coverage said "unavailable"."""

from __future__ import annotations

from typing import Any

import polars as pl

from legival_core.reports.compute.monitorability import teacher_columns, teacher_statuses


def _row(teacher: str, monitor: str, scope: str, status: str, gmean2: float | None, **more: Any) -> dict[str, Any]:
    return {"section": "gmean2", "teacher": teacher, "cue": "sycophancy", "monitor": monitor, "scope": scope,
            "status": status, "gmean2_mean": gmean2, "n_instances": more.get("n", 0),
            "verbalisation_rate": more.get("vr"), "verbalisation_pairs": more.get("pairs", 0), "unparsed": 0}


def _table(rows: list[dict[str, Any]]) -> pl.DataFrame:
    return pl.DataFrame(rows, schema_overrides={"gmean2_mean": pl.Float64, "verbalisation_rate": pl.Float64})


def test_a_first_monitor_without_a_computed_row_is_unavailable_in_both() -> None:
    table = _table([_row("t1", "judge", "cot", "unavailable: no eligible instance", None),
                    _row("t1", "lexical", "cot", "computed", 0.4, n=5, vr=0.5, pairs=2)])
    assert teacher_columns(table).height == 0  # no number from the second monitor
    assert teacher_statuses(table)["t1"]["gmean2"] == ("unavailable", 0, "no eligible instance")


def test_the_number_and_the_status_come_from_the_first_monitors_cot_rows() -> None:
    table = _table([_row("t1", "judge", "cot", "computed", 0.2, n=4, vr=0.25, pairs=4),
                    _row("t1", "judge", "cot_answer", "computed", 0.9, n=4, vr=0.25, pairs=4),
                    _row("t1", "lexical", "cot", "computed", 0.7, n=4, vr=0.25, pairs=4),
                    _row("t2", "judge", "cot", "unavailable: no eligible instance", None),
                    _row("t2", "lexical", "cot", "computed", 0.6, n=3, vr=0.5, pairs=2)])
    cols = {r["teacher"]: r for r in teacher_columns(table).iter_rows(named=True)}
    assert cols.keys() == {"t1"} and cols["t1"]["gmean2"] == 0.2
    statuses = teacher_statuses(table)
    assert statuses["t1"]["gmean2"] == ("computed", 4, "")
    assert statuses["t2"]["gmean2"][0] == "unavailable"
