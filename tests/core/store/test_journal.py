"""The journal beside a store (legival_core/store/journal.py, docs/architecture.md "The journal"): a
read-only open shows it without writing, a writable open absorbs it once however often it runs, a crash
between the store's commit and the journal's delete stores nothing twice, appends from many threads and
processes all arrive, and a damaged journal is an error that leaves the store alone."""

from __future__ import annotations

import subprocess
import sys
import threading
from datetime import datetime
from pathlib import Path

import pytest

from legival_core.store import Store, StoreError
from legival_core.store import journal as journal_mod
from legival_core.store.journal import Journal, journal_path
from tests._sql import rows

AT = datetime(2026, 12, 5, 12, 0, 0, 123456)


def answer(code: str, item: str, text: str = "42") -> dict[str, object]:
    return {"study": "s", "code": code, "item_id": item, "answer": text, "rating": 3, "started_at": None,
            "submitted_at": AT, "seconds": 1.25}


@pytest.fixture
def db(tmp_path: Path) -> Path:
    path = tmp_path / "s.duckdb"
    Store(path).close()
    return path


def stored(db: Path, read_only: bool = True) -> list[tuple[object, ...]]:
    with Store(db, read_only=read_only) as store:
        return rows(store, "SELECT code, item_id, answer, rating, submitted_at, seconds FROM study_answers "
                           "ORDER BY code, item_id")


def test_a_read_only_open_shows_the_journal_and_writes_nothing(db: Path) -> None:
    with Journal(db) as j:
        j.append("study_answers", [answer("P01", "i1"), answer("P02", "i1", "7")])
        j.append("study_events", [{"study": "s", "code": "P01", "occurred_at": AT, "event": "consent", "detail": None}])
        before = db.read_bytes()
        assert stored(db) == [("P01", "i1", "42", 3, AT, 1.25), ("P02", "i1", "7", 3, AT, 1.25)]
        with Store(db, read_only=True) as store:
            assert store.journaled == 3
            assert rows(store, "SELECT count(*) FROM study_events")[0][0] == 1
            # a join of the view with itself, and the tables' own names, still work
            assert rows(store, "SELECT count(*) FROM study_answers a JOIN main.study_answers b USING (code)")[0][0] == 2
        assert db.read_bytes() == before and j.pending() == 3


def test_a_writable_open_absorbs_once_and_a_repeat_stores_nothing_twice(db: Path) -> None:
    with Journal(db) as j:
        j.append("study_answers", [answer("P01", "i1")])
        j.append("study_answers", [answer("P01", "i1")])  # the same row twice (a retried commit)
        with Store(db) as store:
            assert store.journaled == 1
        assert j.pending() == 0
        j.append("study_answers", [answer("P01", "i1"), answer("P01", "i2")])  # absorbed before, and a new one
        with Store(db) as store:
            assert store.journaled == 1
    assert stored(db, read_only=False) == [("P01", "i1", "42", 3, AT, 1.25), ("P01", "i2", "42", 3, AT, 1.25)]


def test_a_crash_between_the_stores_commit_and_the_journals_delete_stores_nothing_twice(
        db: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    with Journal(db) as j:
        j.append("study_answers", [answer("P01", "i1"), answer("P02", "i1")])

        def crash(_path: Path, _upto: int) -> None:
            raise OSError("killed here")
        monkeypatch.setattr(journal_mod, "_forget", crash)
        with pytest.raises(OSError, match="killed here"):
            Store(db)
        monkeypatch.undo()
        assert j.pending() == 2  # still in the journal
        with Store(db) as store:
            assert store.journaled == 0  # stored already: nothing new
        assert j.pending() == 0
    assert len(stored(db)) == 2


def test_appends_from_threads_and_processes_all_arrive(db: Path) -> None:
    script = ("import sys; from legival_core.store.journal import Journal\n"
              "from datetime import datetime\n"
              "j = Journal(sys.argv[1])\n"
              "for i in range(50): j.append('study_answers', [{'study': 's', 'code': 'X' + sys.argv[2], "
              "'item_id': f'i{i}', 'answer': 'a', 'rating': None, 'started_at': None, "
              "'submitted_at': datetime(2026, 1, 1), 'seconds': None}])\n")
    procs = [subprocess.Popen([sys.executable, "-c", script, str(db), str(n)]) for n in range(2)]
    with Journal(db) as j:
        threads = [threading.Thread(target=lambda t=t: [j.append("study_answers", [answer(f"T{t}", f"i{i}")])
                                                        for i in range(50)]) for t in range(4)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
    assert [p.wait(120) for p in procs] == [0, 0]
    with Store(db) as store:
        assert store.journaled == 300
    assert len(stored(db)) == 300


def test_a_damaged_journal_is_an_error_and_the_store_is_left_alone(db: Path) -> None:
    with Journal(db) as j:
        j.append("study_answers", [answer("P01", "i1")])
    path = journal_path(db)
    for p in path.parent.glob("journal.sqlite3-*"):
        p.unlink()
    path.write_bytes(b"not a database" * 100)
    before = db.read_bytes()
    for read_only in (True, False):
        with pytest.raises(StoreError, match="journal cannot be read"):
            Store(db, read_only=read_only)
    assert db.read_bytes() == before


def test_only_journaled_tables_are_accepted(db: Path) -> None:
    with Journal(db) as j, pytest.raises(ValueError, match="not a journaled table"):
        j.append("traces", [{"trace_id": "x"}])
