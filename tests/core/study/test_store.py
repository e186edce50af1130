"""The store side the study server calls (legival_core/store/study.py): a participant's current item is
their first unanswered position, one answer per item, answers only to the current item."""

from __future__ import annotations

from pathlib import Path

import pytest

from legival_core.store import Store, study_import
from legival_core.store import study as reads
from tests._cli import legival
from tests.core.study.helpers import make_store


def test_answers_advance_the_position_and_a_second_answer_is_refused(tmp_path: Path) -> None:
    db = make_store(tmp_path / "s.duckdb", n_problems=20, stating=range(0, 20, 2))
    r = legival("study", "create", "--db", str(db), "--name", "pilot", "--problems", "12", "--participants", "2",
                "--per-participant", "3", "--attention", "1")
    assert r.returncode == 0, r.stderr
    with Store(db) as store:
        plan = reads.assignments(store, "pilot")
        mine = plan.filter(plan["code"] == "P01")["item_id"].to_list()
        first = reads.next_item(store, "pilot", "P01")
        assert first is not None and (first.position, first.total, first.item_id) == (0, 4, mine[0])
        with pytest.raises(reads.AnswerRefused, match=f"not participant P01's current item \\({mine[0]} is\\)"):
            reads.record_answer(store, "pilot", "P01", mine[1], "7", None, None, None)
        reads.record_answer(store, "pilot", "P01", mine[0], "42", 4, None, 12.5)
        with pytest.raises(reads.AnswerRefused, match="answered already"):
            reads.record_answer(store, "pilot", "P01", mine[0], "43", None, None, None)
        nxt = reads.next_item(store, "pilot", "P01")
        assert nxt is not None and (nxt.position, nxt.item_id) == (1, mine[1])
        reads.add_event(store, "pilot", "P01", "consent")
    with Store(db) as store:  # reopened: the answer was committed, the participant resumes at position 1
        assert reads.next_item(store, "pilot", "P01").position == 1  # type: ignore[union-attr]
        got = reads.answers(store, "pilot")
        assert got.select("code", "item_id", "answer", "rating", "seconds").rows() == [("P01", mine[0], "42", 4, 12.5)]
        assert reads.progress(store, "pilot").rows() == [("P01", 1, 4), ("P02", 0, 4)]
        for item in mine[1:]:
            reads.record_answer(store, "pilot", "P01", item, "1", None, None, None)
        assert reads.next_item(store, "pilot", "P01") is None
        with pytest.raises(reads.AnswerRefused, match="they are done"):
            reads.record_answer(store, "pilot", "P01", next(i for i in plan["item_id"] if i not in mine), "1",
                                None, None, None)


def test_answers_imported_out_of_order_are_skipped_by_the_server_side(tmp_path: Path) -> None:
    """Label Studio may fill a participant's positions in any order (`import_answers`): the current item
    is the first position still unanswered, never an answered one."""
    db = make_store(tmp_path / "s.duckdb", n_problems=20, stating=range(0, 20, 2))
    r = legival("study", "create", "--db", str(db), "--name", "pilot", "--problems", "12", "--participants", "2",
                "--per-participant", "3", "--attention", "1")
    assert r.returncode == 0, r.stderr
    with Store(db) as store:
        plan = reads.assignments(store, "pilot")
        mine = plan.filter(plan["code"] == "P01")["item_id"].to_list()
        study_import.import_answers(store, "pilot", [study_import.ImportedAnswer("P01", mine[1], "5", None, None, None, None, "t1")])
        now = reads.next_item(store, "pilot", "P01")
        assert now is not None and (now.position, now.item_id) == (0, mine[0])
        reads.record_answer(store, "pilot", "P01", mine[0], "6", None, None, None)
        now = reads.next_item(store, "pilot", "P01")
        assert now is not None and (now.position, now.item_id) == (2, mine[2])  # position 1 was imported
        with pytest.raises(reads.AnswerRefused, match="answered already"):
            reads.record_answer(store, "pilot", "P01", mine[1], "7", None, None, None)

