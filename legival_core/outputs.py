"""What a command writes, and what it may never replace (docs/security.md, "Outputs").

Legi-Val never deletes or overwrites what it did not write. Two rules hold for every command that
writes a file or a folder; the CLI checks every output parameter before a command runs
(`legival/paths.py`, enforced for every registered command by tests/cli/test_outputs_guard.py), a
spec's `report.out` is checked before a run, and the writers below check again themselves:

1. **Protected paths.** An output is never one of a store's files (`store_files`: the DuckDB file, its
   write-ahead log, its study key folder), never an input of the same command, never holds one of them
   (an `--out` folder that contains the store) and never lies inside one (an `--out` inside the key
   folder). Nor does an output file replace any DuckDB store (recognised by its header, whatever its
   name): a typo must not turn another benchmark into a CSV file.
2. **Folders written whole** (a report, a study export) replace only a folder that an earlier output of
   the same kind wrote: the manifest it leaves (`MANIFEST`: who wrote it, and every file) lists every
   file in the folder. A folder that holds anything else (an input, a store, a key file, a note, a
   symbolic link) is refused before anything is written, naming what it holds.

A folder written whole goes into a new folder beside it (`DIR.parent/.DIR.name.tmp-XXXX`, the same file
system), then swaps into place: DIR is renamed to a backup name, the new folder to DIR, and the backup
is deleted. A failure before the swap (a full disk, a file too large, an interrupt) removes the new
folder and leaves DIR exactly as it was; no reader ever sees half of one output and half of another.
"""

from __future__ import annotations

import errno
import json
import os
import secrets
import shutil
import stat
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

__all__ = ["MANIFEST", "OutputRefused", "Protected", "check_output", "clean_leftovers", "foreign_entries",
           "is_store_file", "protected_store", "refuse_foreign", "replaced_whole", "sidecar", "store_files",
           "write_manifest"]

MANIFEST = ".legival-output.json"
"""The list of the files an output folder holds and who wrote it, kept in the folder."""
EARLIER_MANIFEST = ".legival-report.json"
"""The name reports gave their manifest before other outputs had one: read, so earlier reports stay
replaceable."""

REPORT_WRITER = "legival report"
REPORT_SUFFIXES = (".csv", ".png", ".parquet", ".html")
"""The files of a report written before the manifest existed."""

SIDECARS = {"wal": ".wal", "studies": ".studies", "journal": ".journal"}
"""The files beside a store that belong to it: DuckDB's write-ahead log (commits not yet checkpointed
live there), the study key folder (the only way to a study's links) and the journal folder (what the
servers acknowledged and the store has not absorbed yet: `store/journal.py`). The one list of them."""

DUCKDB_MAGIC = b"DUCK"
"""Bytes 8..12 of every DuckDB database file."""


class OutputRefused(ValueError):
    """An output that would replace, hold or lie inside what the command must not touch; the message
    names the option, the path and what it is."""


@dataclass(frozen=True, slots=True)
class Protected:
    """A path no output may be, hold or lie inside, and what it is ("the store", "an input")."""

    path: Path
    what: str
    folder_of_its_own: bool = False
    """Nothing may be written inside it either (the store's key folder and journal)."""


def sidecar(db: str | Path, kind: str) -> Path:
    """The store's `kind` file beside it (`SIDECARS`): `<db>.wal`, `<db>.studies`."""
    db = Path(db)
    return db.with_name(db.name + SIDECARS[kind])


def store_files(db: str | Path) -> tuple[Path, ...]:
    """The store file and every file beside it that belongs to it."""
    return (Path(db), *(sidecar(db, k) for k in SIDECARS))


def protected_store(db: str | Path) -> list[Protected]:
    """The store's files, as protected paths."""
    names = {"wal": "the store's write-ahead log", "studies": "the store's study key folder",
             "journal": "the store's journal"}
    return [Protected(Path(db), "the store"), *(Protected(sidecar(db, k), names[k], True) for k in SIDECARS)]


def is_store_file(path: Path) -> bool:
    """A regular file that is a DuckDB database (its header says so), or such a file's write-ahead log."""
    try:
        if not path.is_file():
            return False
        with path.open("rb") as f:
            head = f.read(12)
    except OSError:
        return False
    if head[8:12] == DUCKDB_MAGIC:
        return True
    return path.name.endswith(SIDECARS["wal"]) and is_store_file(path.with_name(path.name[: -len(SIDECARS["wal"])]))


def _store_owning(path: Path) -> tuple[Path, Path, str] | None:
    """(the store, its file, what that file is) when `path` is or lies inside a file beside a store that
    belongs to it (`SIDECARS`), whether or not the command was given that store."""
    names = {"wal": "write-ahead log", "studies": "study key folder", "journal": "journal"}
    for p in (path, *path.parents):
        for kind, suffix in SIDECARS.items():
            if p.name.endswith(suffix) and len(p.name) > len(suffix):
                db = p.with_name(p.name[: -len(suffix)])
                if is_store_file(db):
                    return db, p, names[kind]
    return None


def _real(path: Path) -> Path:
    return Path(os.path.realpath(path))


def check_output(out: Path, option: str, protected: Sequence[Protected], folder: bool) -> None:
    """Raise `OutputRefused` when the output `out` (a folder when `folder`, else a file) is, holds or lies
    inside a protected path, or (a file) would replace a DuckDB store (module docstring, rule 1)."""
    real = _real(out)
    for p in protected:
        rp = _real(p.path)
        if not os.path.lexists(p.path) and not os.path.lexists(rp):
            continue
        if rp == real:
            raise OutputRefused(f"{option} {out}: is {p.what} ({p.path}); an output never replaces it: "
                                "give a path of its own")
        if rp.is_relative_to(real):
            raise OutputRefused(f"{option} {out}: holds {p.what} ({p.path}); an output {'folder ' if folder else ''}"
                                "may not hold the store's files or an input: give a folder of its own")
        if real.is_relative_to(rp) and (p.folder_of_its_own or rp.is_file()):
            raise OutputRefused(f"{option} {out}: lies inside {p.what} ({p.path}): give a path outside it")
    owner = _store_owning(real)
    if owner is not None:
        raise OutputRefused(f"{option} {out}: {'is' if owner[1] == real else 'lies inside'} the {owner[2]} of the "
                            f"store {owner[0]}: give a path outside the store's files")
    if is_store_file(real):  # a folder output too: say what the file is, not only that it is no folder
        raise OutputRefused(f"{option} {out}: is a DuckDB store; an output {'folder' if folder else 'file'} never "
                            f"replaces one: give {'a folder of its own' if folder else 'another file name'}")
    if folder and real.exists() and not real.is_dir():
        raise OutputRefused(f"{option} {out}: is a file, not a folder")
    if not folder and real.is_dir():
        raise OutputRefused(f"{option} {out}: is a folder (give the output file's path)")


# --------------------------------------------------------------------------------- folders written whole


def _listed(out: Path, writer: str) -> set[str] | None:
    """The files the folder's manifest lists when `writer` wrote it; None without a manifest (or one of
    another writer, or unreadable: nothing is listed then)."""
    name = MANIFEST if (out / MANIFEST).exists() or writer != REPORT_WRITER else EARLIER_MANIFEST
    from legival_core import untrusted_json

    try:
        manifest = untrusted_json.loads((out / name).read_text(encoding="utf-8"))
        files = manifest["files"]
        who = manifest.get("written_by", REPORT_WRITER)
    except (OSError, ValueError, KeyError, TypeError, AttributeError):  # JsonRefused is a ValueError
        return None
    if who != writer or not isinstance(files, list) or not all(isinstance(f, str) for f in files):
        return None
    return set(files)


def foreign_entries(out: Path, writer: str = REPORT_WRITER) -> list[str]:
    """The entries of an existing folder `out` (relative paths, sorted) that no earlier output of
    `writer` wrote: empty when `out` is absent, empty, or entirely such an output. Symbolic links are
    always foreign (an output never writes one)."""
    if not out.is_dir():
        return []
    listed = _listed(out, writer)
    if listed is None and writer == REPORT_WRITER and (out / "index.html").is_file():
        # a report written before manifests existed: its dashboard and only plain report files
        return [p.name for p in sorted(out.iterdir())
                if not (p.name.endswith(REPORT_SUFFIXES) and p.is_file() and not p.is_symlink())]
    has_manifest = listed is not None
    listed = listed or set()
    foreign: list[str] = []

    def walk(folder: Path, prefix: str) -> None:
        for p in sorted(folder.iterdir()):
            rel = prefix + p.name
            if rel in (MANIFEST, EARLIER_MANIFEST) and has_manifest:
                continue
            if p.is_symlink() or not (p.is_file() or p.is_dir()):
                foreign.append(rel)
            elif p.is_dir():
                if not any(f.startswith(rel + "/") for f in listed):
                    foreign.append(rel + "/")
                else:
                    walk(p, rel + "/")
            elif rel not in listed:
                foreign.append(rel)

    walk(out, "")
    return foreign


def _shown(names: Sequence[str]) -> str:
    return ", ".join(names[:3]) + (f" and {len(names) - 3} more" if len(names) > 3 else "")


def refuse_foreign(out: Path, writer: str = REPORT_WRITER) -> None:
    """Raise FileExistsError when `out` holds anything but an earlier output of `writer`."""
    foreign = foreign_entries(out, writer)
    if foreign:
        what = "report" if writer == REPORT_WRITER else f"`{writer}`"
        raise FileExistsError(
            errno.EEXIST,
            f"it holds {_shown(foreign)}, which no {what} wrote; it replaces its folder whole, so choose a new or "
            "empty folder, or remove them", str(out))


def _beside(out: Path, kind: str) -> Path:
    """A name `.NAME.KIND-XXXX` beside `out` that nothing has yet."""
    while True:
        path = out.parent / f".{out.name}.{kind}-{secrets.token_hex(4)}"
        if not os.path.lexists(path):
            return path


def _new_dir_beside(out: Path) -> Path:
    """A new folder beside `out` with the permissions a new folder gets (those of `out` when it exists)."""
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
    """The new files on disk before the swap makes them the output (a crash right after it must not
    leave empty files)."""
    for p in folder.rglob("*"):
        if p.is_file() and not p.is_symlink():
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
    except OSError:  # a file system that cannot sync a folder: the rename is still atomic
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
def replaced_whole(out: str | Path, writer: str = REPORT_WRITER) -> Iterator[Path]:
    """Yield a new, empty folder to write into; when the block ends without an error it becomes `out`
    (the old `out` deleted), else it is deleted and `out` is left as it was. Refuses (FileExistsError)
    an `out` that holds anything but an earlier output of `writer`. What a killed writer left beside
    `out` is cleaned first (`clean_leftovers`)."""
    out = Path(out)
    if out.is_symlink():
        out = out.resolve()  # the folder it points to is the output; the link stays
    out = out.absolute()
    if out.exists() and not out.is_dir():
        raise NotADirectoryError(errno.ENOTDIR, os.strerror(errno.ENOTDIR), str(out))
    out.parent.mkdir(parents=True, exist_ok=True)
    clean_leftovers(out)
    refuse_foreign(out, writer)
    new = _new_dir_beside(out)
    lock = _hold(new)  # held until the backup is gone: the folder is this output's while it is locked
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
    """Remove what writers killed mid-write (SIGKILL, a power cut) left beside `out`: their temporary
    folders (`.OUT.tmp-XXXX`) and backups (`.OUT.old-XXXX`); returns their names. A writer holds a lock
    on its folder (`_hold`) until it is done, so while any such lock is held (another output of `out` in
    progress) nothing is touched. A backup whose swap never finished (no `out` any more) becomes `out`
    again: the last complete output is never lost."""
    import glob

    leftovers = sorted(p for p in out.parent.glob(f".{glob.escape(out.name)}.*-*")
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


def _hold(folder: Path) -> int:
    """An exclusive lock on `folder` (flock on its descriptor: released by the kernel when the process
    ends, however it ends); the descriptor, to close when done."""
    import fcntl

    fd = os.open(folder, os.O_RDONLY)
    fcntl.flock(fd, fcntl.LOCK_EX)
    return fd


def _locked(folder: Path) -> bool:
    """Another process holds `folder`'s lock (an output being written into it or swapping it in)."""
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


def write_manifest(folder: Path, files: Sequence[str], writer: str = REPORT_WRITER) -> str:
    """Record who wrote the folder and its files (relative paths) in `folder` (`MANIFEST`); its name."""
    (folder / MANIFEST).write_text(json.dumps({"written_by": writer, "files": sorted(files)}, indent=1) + "\n",
                                   encoding="utf-8")
    return MANIFEST
