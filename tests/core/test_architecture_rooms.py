"""Every room of the code is named in docs/architecture.md ("Rooms"), and every room named there exists.

A room (the page's own definition) is, under each production root:
- a package: a directory that holds a `.py` file, the root itself included (`legival_core/reports/compute/`);
- a top-level module: a `.py` file directly in a root, other than `__init__.py` and `__main__.py`
  (`legival_core/outputs.py`, `tasks/store_lock.py`).
A module inside a package is not a room, so adding a metric, a source or a stage stays one file; a new
package or top-level module needs its row. The page names a room in the first cell of a table row of its
"Rooms" section, in backticks.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

from tests.conftest import REPO

ROOTS = ("legival_core", "legival", "tasks", "flows", "deployments")
PAGE = REPO / "docs" / "architecture.md"
NOT_ROOMS = ("__init__.py", "__main__.py")
ROW = re.compile(r"^\|\s*`([^`]+)`\s*\|", re.MULTILINE)


def rooms(repo: Path, roots: tuple[str, ...] = ROOTS) -> set[str]:
    """The rooms under `repo` (module docstring), as the page writes them."""
    out: set[str] = set()
    for root in roots:
        base = repo / root
        for py in base.rglob("*.py"):
            rel = py.relative_to(repo)
            if "__pycache__" in rel.parts:
                continue
            out.add(rel.parent.as_posix() + "/")
            if py.parent == base and py.name not in NOT_ROOMS:
                out.add(rel.as_posix())
    return out


def named_rooms(page: str) -> list[str]:
    """The first backticked cell of every table row of the page's "Rooms" section, in page order."""
    start = page.index("\n## Rooms\n")
    end = page.find("\n## ", start + 1)
    return ROW.findall(page[start:] if end < 0 else page[start:end])


@dataclass(frozen=True, slots=True)
class Mismatch:
    unnamed: list[str]
    """Rooms the page does not name."""
    stale: list[str]
    """Names on the page that are no room."""
    twice: list[str]
    """Rooms the page names more than once."""

    def __bool__(self) -> bool:
        return bool(self.unnamed or self.stale or self.twice)


def mismatch(repo: Path, page: str) -> Mismatch:
    there, named = rooms(repo), named_rooms(page)
    return Mismatch(sorted(there - set(named)), sorted(set(named) - there),
                    sorted({n for n in named if named.count(n) > 1}))


def test_the_page_names_every_room_and_only_rooms() -> None:
    m = mismatch(REPO, PAGE.read_text(encoding="utf-8"))
    assert not m.unnamed, f"rooms with no row in docs/architecture.md \"Rooms\" (add one line each): {m.unnamed}"
    assert not m.stale, f"rows of docs/architecture.md \"Rooms\" that name no room (renamed or gone?): {m.stale}"
    assert not m.twice, f"rooms named twice in docs/architecture.md \"Rooms\": {m.twice}"


def _skeleton(tmp: Path, page: str) -> Path:
    """A tree holding exactly the rooms the page names (empty files): the check passes on it whatever
    the repository holds today, so each change below is the only difference."""
    copy = tmp / "repo"
    for room in named_rooms(page):
        target = copy / room
        if room.endswith("/"):
            target.mkdir(parents=True, exist_ok=True)
            (target / "__init__.py").touch()
        else:
            target.parent.mkdir(parents=True, exist_ok=True)
            target.touch()
    return copy


def test_the_room_check_fails_on_a_room_the_page_does_not_name(tmp_path: Path) -> None:
    page = PAGE.read_text(encoding="utf-8")
    copy = _skeleton(tmp_path, page)
    assert not mismatch(copy, page)
    (copy / "legival_core" / "stages" / "new_stage.py").touch()  # a module inside a package: no room
    (copy / "legival_core" / "reports" / "render" / "templates").mkdir(exist_ok=True)  # data, no .py: no room
    (copy / "legival_core" / "reports" / "render" / "templates" / "page.html").touch()
    (copy / "tasks" / "__main__.py").touch()
    assert not mismatch(copy, page)
    (copy / "legival_core" / "new_room.py").touch()
    (copy / "tasks" / "_helpers.py").touch()
    (copy / "legival_core" / "room_without_init").mkdir()
    (copy / "legival_core" / "room_without_init" / "m.py").touch()  # a namespace package is a room too
    m = mismatch(copy, page)
    assert m.unnamed == ["legival_core/new_room.py", "legival_core/room_without_init/", "tasks/_helpers.py"]
    assert m.stale == [] and m.twice == []


def test_the_room_check_fails_on_a_stale_row_a_missing_row_and_a_double_row(tmp_path: Path) -> None:
    page = PAGE.read_text(encoding="utf-8")
    copy = _skeleton(tmp_path, page)
    row = "| `legival_core/catalog.py` |"
    assert page.count(row) == 1
    gone = page.replace(row, "| `legival_core/spec/` |")  # the row of a renamed room left as it was
    m = mismatch(copy, gone)
    assert m.unnamed == ["legival_core/catalog.py"] and m.stale == ["legival_core/spec/"] and m.twice == []
    twice = page.replace(row, row.replace("catalog.py", "registry.py"))
    assert mismatch(copy, twice).twice == ["legival_core/registry.py"]
    outside = page.replace("\n## Rooms\n", "\n| `legival_core/elsewhere/` | a table of another section |\n\n## Rooms\n")
    assert not mismatch(copy, outside)  # only the Rooms section's rows count
