"""No command writes over what it did not write (docs/security.md "Outputs", legival_core/outputs.py).

Every `Path` parameter of every registered command says what it is (`legival.paths.Role`), and every
output parameter is tried against the store's files, the folder holding them, the key folder and the
command's inputs: each is one `error:` line (exit 2) with nothing touched. The list of outputs comes from
the registered commands themselves, so a new command with an output and no entry in `INVOCATIONS` fails
here. Then the case that deleted a store (issue 45): `legival study export --out "$PWD" --force` in the
folder that holds the store, and the other shapes of a folder replaced whole.
"""

from __future__ import annotations

import hashlib
import os
from collections.abc import Callable
from pathlib import Path

import pytest

from legival.cli import app
from legival.paths import OUTPUTS, Role, command_infos, path_params
from legival_core.outputs import MANIFEST
from legival_core.study.links import key_path
from tests._cli import legival
from tests.core.study.server_store import STUDY, make_served_study

REPO = Path(__file__).resolve().parents[2]
SPEC = str(REPO / "examples" / "demo.yaml")

Argv = Callable[[Path, Path, str], list[str]]
"""(store, an input file, the output path) -> the command's arguments."""

INVOCATIONS: dict[tuple[str, ...], Argv] = {
    ("agreement", "out"): lambda db, inp, o: ["agreement", str(inp), "--a", "a", "--b", "b", "--out", o],
    ("grade", "out"): lambda db, inp, o: ["grade", str(inp), "--dataset", "gsm8k", "--out", o],
    ("monitor", "out"): lambda db, inp, o: ["monitor", "--db", str(db), "--supervisor", "lexical", "--out", o],
    ("monitorability", "score", "out"): lambda db, inp, o: ["monitorability", "score", str(inp), "--out", o],
    ("report", "out"): lambda db, inp, o: ["report", "--db", str(db), "--out", o],
    ("rm", "out"): lambda db, inp, o: ["rm", "--db", str(db), "--out", o],
    ("run", "out"): lambda db, inp, o: ["run", SPEC, "--db", str(db), "--out", o],
    ("run", "progress_file"): lambda db, inp, o: ["run", SPEC, "--db", str(db), "--progress-file", o],
    ("diff", "out"): lambda db, inp, o: ["diff", "--db", str(db), "--out", o],
    ("z3", "out"): lambda db, inp, o: ["z3", str(inp), "--out", o],
    ("study", "export", "out"): lambda db, inp, o: ["study", "export", "--db", str(db), "--name", STUDY,
                                                    "--format", "label-studio", "--out", o, "--force"],
    ("reward", "report", "out"): lambda db, inp, o: ["reward", "report", "--db", str(db), "--out", o],
    ("add-teacher", "spec"): lambda db, inp, o: ["add-teacher", "t9", "--traces", str(inp), "--spec", o],
    ("add-teacher", "prefect_file"): lambda db, inp, o: ["add-teacher", "t9", "--traces", str(inp), "--prefect-file", o],
}
"""How to call each command with one output pointed somewhere: one entry per output parameter."""

HAS_INPUT = {("agreement", "out"), ("grade", "out"), ("z3", "out"), ("add-teacher", "spec"), ("add-teacher", "prefect_file"),
             ("monitorability", "score", "out")}


def _outputs() -> list[tuple[tuple[str, ...], str, Role]]:
    found = []
    for words, info in command_infos(app):
        for name, (_option, role) in path_params(getattr(info.callback, "__wrapped__", info.callback)).items():
            if role in OUTPUTS:
                found.append((words, name, role))
    return found


def test_every_path_parameter_of_every_command_says_what_it_is() -> None:
    missing, unguarded = [], []
    for words, info in command_infos(app):
        callback = getattr(info.callback, "__wrapped__", info.callback)
        missing += [f"{' '.join(words)} {name}" for name, (_o, role) in path_params(callback).items() if role is None]
        if not getattr(info.callback, "__legival_guarded__", False):
            unguarded.append(" ".join(words))
    assert not missing, f"give these Path parameters a legival.paths.Role: {missing}"
    assert not unguarded, unguarded


def test_every_output_parameter_has_an_invocation_here() -> None:
    """A new command with an output must be tried below: add it to INVOCATIONS."""
    have = {(*words, name) for words, name, _role in _outputs()}
    assert have == set(INVOCATIONS), (sorted(have - set(INVOCATIONS)), sorted(set(INVOCATIONS) - have))


def _digest(folder: Path) -> dict[str, str]:
    return {str(p.relative_to(folder)): hashlib.sha256(p.read_bytes()).hexdigest() if p.is_file() else "dir"
            for p in sorted(folder.rglob("*"))}


@pytest.fixture(scope="module")
def study_store(tmp_path_factory: pytest.TempPathFactory) -> Path:
    db = tmp_path_factory.mktemp("guard") / "work" / "s.duckdb"
    db.parent.mkdir()
    make_served_study(db, participants=2, per_participant=2, n_problems=8, teachers=("alpha", "beta"))
    return db


@pytest.fixture
def work(study_store: Path, tmp_path: Path) -> Path:
    """A folder holding a copy of the study store, its key folder, a note and an input file."""
    import shutil

    folder = tmp_path / "work"
    shutil.copytree(study_store.parent, folder)
    (folder / "notes.txt").write_text("my notes\n")
    (folder / "in.jsonl").write_text('{"pred": "1", "gold": "1"}\n')
    return folder


TARGETS = {
    "the store": lambda w: w / "s.duckdb",
    "the folder holding the store": lambda w: w,
    "the key folder": lambda w: key_path(w / "s.duckdb", STUDY).parent,
    "inside the key folder": lambda w: key_path(w / "s.duckdb", STUDY).parent / "x",
    "an input": lambda w: w / "in.jsonl",
}


@pytest.mark.parametrize(("output", "target"), [(o, t) for o in sorted(INVOCATIONS) for t in sorted(TARGETS)
                                                 if t != "an input" or o in HAS_INPUT],
                         ids=lambda v: "-".join(v) if isinstance(v, tuple) else v)
def test_no_output_replaces_holds_or_lies_inside_the_store_or_an_input(work: Path, output: tuple[str, ...],
                                                                       target: str) -> None:
    before = _digest(work)
    path = TARGETS[target](work)
    ran = legival(*INVOCATIONS[output](work / "s.duckdb", work / "in.jsonl", str(path)), cwd=work)
    line = ran.error()
    assert any(w in line for w in ("is the store", "holds the store", "lies inside", "is a DuckDB store",
                                   "is an input", "holds an input", "key folder")), line
    assert _digest(work) == before


def test_study_export_force_in_the_folder_holding_the_store_deletes_nothing(work: Path) -> None:
    """The case that deleted a store, its key folder and a note (issue 45, class 1)."""
    before = _digest(work)
    ran = legival("study", "export", "--db", "s.duckdb", "--name", STUDY, "--format", "label-studio",
                  "--out", os.fspath(work), "--force", cwd=work)
    ran.error("--out", "holds the store")
    assert _digest(work) == before


def test_force_replaces_only_an_earlier_export(work: Path, tmp_path: Path) -> None:
    export = ["study", "export", "--db", str(work / "s.duckdb"), "--name", STUDY, "--format", "label-studio"]
    out = tmp_path / "ls"
    first = legival(*export, "--out", str(out))
    assert first.returncode == 0, first.stderr
    files = _digest(out)
    assert MANIFEST in files and "participants/P01.json" in files
    # an earlier export: refused without --force (saying --force replaces it), replaced with it
    legival(*export, "--out", str(out)).error("an earlier export: --force replaces it")
    again = legival(*export, "--out", str(out), "--force")
    assert again.returncode == 0, again.stderr
    assert _digest(out) == files  # the same study: the same files
    # a note dropped into the export, a nested file, a symbolic link: refused by name, nothing deleted
    for shape, make in (("notes.txt", lambda: (out / "notes.txt").write_text("mine")),
                        ("participants/extra.json", lambda: (out / "participants" / "extra.json").write_text("{}")),
                        ("link", lambda: (out / "link").symlink_to(work / "s.duckdb"))):
        make()
        before = _digest(out)
        legival(*export, "--out", str(out), "--force").error(shape, "which no `legival study export` wrote")
        assert _digest(out) == before
        target = out / shape
        target.unlink()
    # a report folder is not an export: --force does not replace it
    report = tmp_path / "report"
    report.mkdir()
    (report / "index.html").write_text("<html></html>")
    (report / MANIFEST).write_text('{"written_by": "legival report", "files": ["index.html"]}')
    legival(*export, "--out", str(report), "--force").error("index.html")
    assert (report / "index.html").exists()


def test_a_runs_report_folder_from_the_spec_is_checked_before_the_run(work: Path, tmp_path: Path) -> None:
    """`report.out` in a spec that names the folder holding the store: refused before anything runs."""
    import yaml

    spec = yaml.safe_load(Path(SPEC).read_text())
    spec["store"] = str(work / "s.duckdb")
    spec["report"]["out"] = str(work)
    spec["teachers"] = [{**t, "traces": [str(REPO / "examples" / p) for p in t["traces"]]} for t in spec["teachers"]]
    path = tmp_path / "spec.yaml"
    path.write_text(yaml.safe_dump(spec))
    before = _digest(work)
    legival("run", str(path)).error("report.out", "holds the store")
    assert _digest(work) == before
