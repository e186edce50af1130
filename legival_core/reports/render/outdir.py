"""The report directory, written whole or not at all (docs/reports.md, "Safe outputs").

`write_report` writes every file into a new directory beside DIR (`DIR.parent/.DIR.name.tmp-XXXX`,
the same file system), then swaps it into place: DIR is renamed to a backup name, the new directory
to DIR, and the backup is deleted. A failure before the swap (a full disk, a file too large, an
interrupt) removes the new directory and leaves DIR exactly as it was; no reader ever sees half of
one report and half of another.

The report directory belongs to legival: it is replaced whole, so it may only hold a previous report.
A report leaves a manifest (`MANIFEST`, the files it wrote); a DIR whose entries are all in its
manifest (or, a report written before manifests existed, its `index.html` and only plain
`.csv`/`.png`/`.parquet`/`.html` files) is replaced, and one that holds anything else is refused before anything is written: legival
never deletes a file that it did not write.
"""

from __future__ import annotations

import errno
import json
import os
import secrets
import shutil
import stat
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

__all__ = ["MANIFEST", "foreign_entries", "refuse_foreign", "replaced_whole", "write_manifest"]

MANIFEST = ".legival-report.json"
"""The list of the files a report wrote, kept in the report directory."""

REPORT_SUFFIXES = (".csv", ".png", ".parquet", ".html")
"""The files of a report written before the manifest existed."""


def foreign_entries(out: Path) -> list[str]:
    """The entries of an existing directory `out` that no report wrote (sorted; empty when `out` is
    absent, empty or a previous report)."""
    if not out.is_dir():
        return []
    names = sorted(p.name for p in out.iterdir())
    listed: set[str] | None = None
    try:
        listed = set(json.loads((out / MANIFEST).read_text(encoding="utf-8"))["files"])
    except (OSError, ValueError, KeyError, TypeError):
        listed = None
    if listed is not None:
        return [n for n in names if n != MANIFEST and (n not in listed or not (out / n).is_file())]
    if names and "index.html" not in names:  # no report's dashboard: a folder of someone's CSVs, say
        return names
    return [n for n in names
            if not (n.endswith(REPORT_SUFFIXES) and (out / n).is_file() and not (out / n).is_symlink())]


def refuse_foreign(out: Path) -> None:
    """Raise FileExistsError when `out` holds anything but a previous report (`foreign_entries`)."""
    foreign = foreign_entries(out)
    if foreign:
        shown = ", ".join(foreign[:3]) + (f" and {len(foreign) - 3} more" if len(foreign) > 3 else "")
        raise FileExistsError(
            errno.EEXIST,
            f"it holds {shown}, which no report wrote; a report replaces its directory whole, so choose a new or "
            "empty directory, or remove them", str(out))


def _beside(out: Path, kind: str) -> Path:
    """A name `.NAME.KIND-XXXX` beside `out` that nothing has yet."""
    while True:
        path = out.parent / f".{out.name}.{kind}-{secrets.token_hex(4)}"
        if not os.path.lexists(path):
            return path


def _new_dir_beside(out: Path) -> Path:
    """A new directory beside `out` with the permissions a new directory gets (those of `out` when it
    exists)."""
    while True:
        path = _beside(out, "tmp")
        try:
            path.mkdir()
        except FileExistsError:
            continue
        if out.is_dir():
            path.chmod(stat.S_IMODE(out.stat().st_mode))
        return path


def _fsync_tree(folder: Path) -> None:
    """The new files on disk before the swap makes them the report (a crash right after it must not
    leave empty files)."""
    for p in folder.iterdir():
        if p.is_file():
            fd = os.open(p, os.O_RDONLY)
            try:
                os.fsync(fd)
            finally:
                os.close(fd)
    _fsync_dir(folder)


def _fsync_dir(folder: Path) -> None:
    try:
        fd = os.open(folder, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:  # a file system that cannot sync a directory: the rename is still atomic
        pass
    finally:
        os.close(fd)


def _swap(new: Path, out: Path) -> None:
    if not out.exists():
        os.rename(new, out)
        return
    backup = _beside(out, "old")
    os.rename(out, backup)
    try:
        os.rename(new, out)
    except BaseException:
        os.rename(backup, out)
        raise
    shutil.rmtree(backup, ignore_errors=True)


@contextmanager
def replaced_whole(out: str | Path) -> Iterator[Path]:
    """Yield a new, empty directory to write the report into; when the block ends without an error it
    becomes `out` (the old `out` deleted), else it is deleted and `out` is left as it was. Refuses
    (FileExistsError) an `out` that holds anything but a previous report. What a killed report left
    beside `out` is cleaned first (`clean_leftovers`)."""
    out = Path(out)
    if out.is_symlink():
        out = out.resolve()  # the directory it points to is the report; the link stays
    out = out.absolute()
    if out.exists() and not out.is_dir():
        raise NotADirectoryError(errno.ENOTDIR, os.strerror(errno.ENOTDIR), str(out))
    out.parent.mkdir(parents=True, exist_ok=True)
    clean_leftovers(out)
    refuse_foreign(out)
    new = _new_dir_beside(out)
    lock = _hold(new)  # held until the backup is gone: the directory is this report's while it is locked
    try:
        try:
            yield new
            _fsync_tree(new)
            _swap(new, out)
        except BaseException:
            shutil.rmtree(new, ignore_errors=True)
            raise
        _fsync_dir(out.parent)
    finally:
        os.close(lock)


def clean_leftovers(out: Path) -> list[str]:
    """Remove what reports killed mid-write (SIGKILL, a power cut) left beside `out`: their temporary
    directories (`.OUT.tmp-XXXX`) and backups (`.OUT.old-XXXX`); returns their names. A report being
    written holds a lock on its directory (`_hold`) until it is done, so while any such lock is held
    (another report of `out` in progress) nothing is touched. A backup whose swap never finished (no
    `out` any more) becomes `out` again: the last complete report is never lost."""
    leftovers = sorted(p for p in out.parent.glob(f".{glob_escape(out.name)}.*-*")
                       if p.name.rsplit("-", 1)[0] in (f".{out.name}.tmp", f".{out.name}.old")
                       and p.is_dir() and not p.is_symlink())
    if not leftovers:
        return []
    held = [p for p in (*leftovers, out) if p.is_dir() and _locked(p)]
    if held:
        return []
    backups = [p for p in leftovers if p.name.startswith(f".{out.name}.old-")]
    if backups and not out.exists():
        newest = max(backups, key=lambda p: p.stat().st_mtime)
        os.rename(newest, out)
        leftovers.remove(newest)
    for p in leftovers:
        shutil.rmtree(p, ignore_errors=True)
    return [p.name for p in leftovers]


def glob_escape(name: str) -> str:
    """`name` with glob's special characters matched literally."""
    import glob

    return glob.escape(name)


def _hold(folder: Path) -> int:
    """An exclusive lock on `folder` (flock on its descriptor: released by the kernel when the process
    ends, however it ends); the descriptor, to close when done."""
    import fcntl

    fd = os.open(folder, os.O_RDONLY)
    fcntl.flock(fd, fcntl.LOCK_EX)
    return fd


def _locked(folder: Path) -> bool:
    """Another process holds `folder`'s lock (a report being written into it or swapping it in)."""
    import fcntl

    try:
        fd = os.open(folder, os.O_RDONLY)
    except OSError:
        return False
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        return True
    except OSError:
        return False
    finally:
        os.close(fd)
    return False


def write_manifest(folder: Path, files: list[str]) -> str:
    """Record the files of the report in `folder` (`MANIFEST`); returns its name."""
    (folder / MANIFEST).write_text(json.dumps({"written_by": "legival report", "files": sorted(files)}, indent=1)
                                   + "\n", encoding="utf-8")
    return MANIFEST
