"""`legival study create` / `study list` end to end, as a user runs them (in-process): the plan-style
summary, the tables written in one transaction, and every bad input one `error:` line naming its option."""

from __future__ import annotations

import hashlib
import os
from pathlib import Path

import pytest

from legival_core.store import Store
from legival_core.store.schema import STUDY_TABLES
from tests._cli import legival
from tests.core.study.helpers import make_store


@pytest.fixture(scope="module")
def template(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return make_store(tmp_path_factory.mktemp("study") / "t.duckdb", n_problems=20, stating=range(0, 20, 2))


@pytest.fixture
def db(template: Path, tmp_path: Path) -> Path:
    out = tmp_path / "s.duckdb"
    out.write_bytes(template.read_bytes())
    return out


def _tables(db: Path) -> dict[str, int]:
    with Store(db, read_only=True) as store:
        return {t: store.count(t) for t in sorted(STUDY_TABLES)}


def test_create_prints_the_plan_and_links_and_stores_the_design(db: Path) -> None:
    r = legival("study", "create", "--db", str(db), "--name", "pilot", "--teachers", "alpha,beta", "--problems", "8",
                "--depths", "0.5,1", "--per-participant", "8", "--participants", "6", "--seed", "3")
    assert r.returncode == 0, r.stderr
    s = r.summary()
    assert s["command"] == "study create" and s["study"] == "pilot" and s["cells"] == 4
    assert s["items"] == 2 * 2 * 8 and s["attention_items"] >= 2
    assert s["answers_needed"] == 6 * (8 + 2) and s["participant_minutes"] == 6 * 10 * 1.5
    assert s["answers_per_item"] == {"min": 1, "max": 2}  # 6 x 2 answers a cell over 8 items
    assert "estimated participant-minutes: 90" in r.stdout and "alpha" in r.stdout
    assert [ln.split()[0] for ln in r.stdout.splitlines() if "/p/" in ln or "/admin/" in ln] == [
        "P01", "P02", "P03", "P04", "P05", "P06", "admin"]
    assert _tables(db) == {"studies": 1, "study_items": s["items"] + s["attention_items"], "study_participants": 7,
                           "study_assignments": 60, "study_answers": 0, "study_events": 0, "study_grades": 0}
    listed = legival("study", "list", "--db", str(db))
    assert listed.returncode == 0 and listed.summary()["studies"][0]["answers_needed"] == 60
    again = legival("study", "create", "--db", str(db), "--name", "pilot", "--teachers", "alpha,beta", "--problems",
                    "8", "--depths", "0.5,1", "--per-participant", "8", "--participants", "6", "--seed", "3")
    tokens_before = [ln.split()[1] for ln in r.stdout.splitlines() if "/p/" in ln]
    key = db.with_name(db.name + ".studies") / "pilot.key"
    key_sha = hashlib.sha256(key.read_bytes()).hexdigest()
    again.error("study 'pilot' exists", "--name")
    assert hashlib.sha256(key.read_bytes()).hexdigest() == key_sha and _tables(db)["study_participants"] == 7
    assert tokens_before and all(t not in again.stdout for t in tokens_before)


def test_the_same_seed_gives_the_same_design_in_another_store(db: Path, template: Path, tmp_path: Path) -> None:
    other = tmp_path / "o.duckdb"
    other.write_bytes(template.read_bytes())
    args = ("--name", "x", "--problems", "12", "--participants", "5")
    a, b = legival("study", "create", "--db", str(db), *args), legival("study", "create", "--db", str(other), *args)
    assert a.returncode == b.returncode == 0, a.stderr + b.stderr
    with Store(db, read_only=True) as s1, Store(other, read_only=True) as s2:
        from legival_core.store.study import assignments

        assert assignments(s1, "x").equals(assignments(s2, "x"))


@pytest.mark.parametrize(("args", "fragments"), [
    (("--teachers", "alpha,nobody"), ("--teachers", "'nobody'", "alpha, beta, gamma")),
    (("--teachers", "alpha,beta,alpha"), ("--teachers", "'alpha' is named twice")),
    (("--depths", "0.5,1.5"), ("--depths", "1.5 is outside (0, 1]")),
    (("--depths", "0.5,half"), ("--depths", "'half' is not a number")),
    (("--depths", "0,1"), ("--depths", "0.0 is outside (0, 1]")),
    (("--problems", "30"), ("--problems", "teacher alpha has 20 eligible", "alpha x 0.25")),
    (("--problems", "6"), ("--per-participant", "6 distinct problems")),
    (("--problems", "12", "--attention", "5"), ("--attention",)),
    (("--problems", "12", "--per-participant", "0"), ("--per-participant", "greater than or equal to 1")),
    (("--problems", "12", "--name", "../evil"), ("--name", "not a study name")),
    (("--problems", "12", "--consent", "/nonexistent/consent.txt"), ("--consent", "cannot read")),
])
def test_bad_input_is_one_error_line_naming_the_option(db: Path, args: tuple[str, ...], fragments: tuple[str, ...]) -> None:
    base = {"--name": "pilot", "--problems": "12"}
    for flag, value in zip(args[::2], args[1::2], strict=True):
        base[flag] = value
    r = legival("study", "create", "--db", str(db), *[x for kv in base.items() for x in kv])
    r.error(*fragments)
    assert set(_tables(db).values()) == {0}
    assert not (db.with_name(db.name + ".studies") / "pilot.key").exists()


def test_a_missing_store_is_not_created(tmp_path: Path) -> None:
    legival("study", "create", "--db", str(tmp_path / "none.duckdb"), "--name", "a", "--problems", "3").error(
        "no such store")
    assert not (tmp_path / "none.duckdb").exists()


def test_a_key_file_left_without_its_study_is_never_overwritten(db: Path) -> None:
    """A key file for the name with no study in this store (an earlier study's, e.g. of another copy of
    the store) may be the only way to that study's links: refused, kept byte for byte."""
    folder = db.with_name(db.name + ".studies")
    folder.mkdir(mode=0o700)
    key = folder / "pilot.key"
    key.write_bytes(b"k" * 32)
    key.chmod(0o600)
    legival("study", "create", "--db", str(db), "--name", "pilot", "--problems", "12").error(
        "--name", str(key), "a key file from an earlier study named pilot exists", "move it away")
    assert key.read_bytes() == b"k" * 32 and set(_tables(db).values()) == {0}


def test_a_key_folder_open_to_others_is_refused(db: Path) -> None:
    folder = db.with_name(db.name + ".studies")
    folder.mkdir()
    folder.chmod(0o755)
    legival("study", "create", "--db", str(db), "--name", "pilot", "--problems", "12").error(
        str(folder), "mode 0755", "chmod 700")
    assert set(_tables(db).values()) == {0} and not list(folder.iterdir())
    folder.chmod(0o700)
    r = legival("study", "create", "--db", str(db), "--name", "pilot", "--problems", "12")
    assert r.returncode == 0, r.stderr
    folder.chmod(0o750)
    legival("study", "export", "--db", str(db), "--name", "pilot", "--format", "label-studio", "--out",
            str(db.parent / "ls")).error(str(folder), "chmod 700")


def test_a_wrong_key_file_is_refused_by_every_command_that_uses_the_key(db: Path, tmp_path: Path) -> None:
    """Random bytes in place of the key: every link would be dead (404), every item key unknown."""
    r = legival("study", "create", "--db", str(db), "--name", "pilot", "--problems", "12")
    assert r.returncode == 0, r.stderr
    key = db.with_name(db.name + ".studies") / "pilot.key"
    key.write_bytes(os.urandom(32))
    fragments = (str(key), "the key file does not match study pilot (its links would not open)",
                 "restore the key file the study was created with")
    legival("study", "serve", "--db", str(db), "--name", "pilot", "--port", "0").error(*fragments)
    legival("study", "export", "--db", str(db), "--name", "pilot", "--format", "label-studio", "--out",
            str(tmp_path / "ls")).error(*fragments)
    (tmp_path / "e.json").write_text("[]")
    legival("study", "import", "--db", str(db), "--name", "pilot", str(tmp_path / "e.json")).error(*fragments)
    assert not (tmp_path / "ls").exists()
