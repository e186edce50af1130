"""What a spec-driven command checks before its flow starts (`legival run`, `calibrate`, `plan`,
`generate --spec`), and the output folders every command probes before any work: the spec validates,
the chosen teachers' files exist, the report folder may be written (and holds nothing an earlier report
did not write), the Ray cluster and the Prefect API answer, the store is not held. A refusal leaves
nothing behind (`discard_if_unused`). Split from `legival/app.py`, which is the typer app and the
options every command shares."""

from __future__ import annotations

import contextlib
import os
from pathlib import Path
from typing import TYPE_CHECKING

from legival.app import note_migration, say_waiting
from legival.console import fail

if TYPE_CHECKING:
    from legival_core.run_config import BenchmarkSpec


def prepare_spec_run(spec_file: Path, db: Path | None, teachers: list[str] | None,
                     only_generating: bool = False, create: bool = True,
                     out: Path | None = None, check_out: bool = False, hold: bool = False) -> tuple[BenchmarkSpec, Path]:
    """What every spec-driven command checks before a flow starts, exiting with a readable error:
    the spec validates, every chosen teacher that generates has its problems file (so a run fails
    before any model loads), and the store (`--db`, else the spec's) is not locked by another
    process. `only_generating`: the chosen teachers must generate (`legival generate --spec`).
    `create=False` (a dry run): the store is not created, and only checked when it exists.
    `check_out`: the report directory (`out`, else the spec's `report.out`) must be writable, checked
    before the store is created. A run (`create`) also checks, before the store is created, that the
    spec's Ray cluster and the Prefect API answer within `execution.connect_timeout_s` (tasks/infra.py).
    `hold` (a run): the store stays open, handed to the flow's driver (`tasks.store_lock.adopt`), so no
    other process can take it between this check and the flow's first task. Nothing is left behind by
    a refusal here: the report directory is only probed (removed again when it did not exist)."""

    os.environ.setdefault("PREFECT_SERVER_ANALYTICS_ENABLED", "false")
    os.environ.setdefault("PREFECT_SERVER_EPHEMERAL_STARTUP_TIMEOUT_SECONDS", "120")
    from legival_core.run_config import SpecError, load_spec
    from legival_core.store import Store, StoreError

    try:
        s = load_spec(spec_file)
        if only_generating:
            chosen = s.generating_teachers(teachers)
        else:
            chosen = list(s.teachers) if not teachers else [s.teacher(n) for n in teachers]
        for t in chosen:
            if t.generate is not None:
                t.generate.jobs(s.datasets, t.name)
    except SpecError as e:
        fail(str(e))
    db_path = (db or s.store).resolve()
    if check_out:
        report_out = out if out is not None else s.report.out
        what = "--out" if out is not None else f"{spec_file}: report.out"
        _check_report_out(report_out, what, db_path, spec_file)
        writable_dir(report_out, what, keep=False)
    if create:
        check_infrastructure(s, spec_file)
    if not create and not db_path.exists():
        return s, db_path
    existed = db_path.exists()
    try:
        store = Store(db_path, read_only=not create, on_wait=say_waiting)
    except StoreError as e:
        fail(str(e))
    if not existed:
        _CREATED.add(db_path)
    note_migration(store)
    if hold and create:
        from tasks.store_lock import adopt

        adopt(store)
    else:
        store.close()
    return s, db_path


def _check_report_out(out: Path, what: str, db_path: Path, spec_file: Path) -> None:
    """A run's report folder (`--out` or the spec's `report.out`) is checked before the run starts, as
    every command's outputs are (`legival.paths`): not the store's files or the spec, not holding them,
    and only ever an earlier report (it is replaced whole at the end of the run)."""
    from legival_core.outputs import OutputRefused, Protected, check_output, protected_store, refuse_foreign

    try:
        check_output(out, what, [*protected_store(db_path), Protected(spec_file, "the spec")], folder=True)
        refuse_foreign(out)
    except OutputRefused as e:
        fail(str(e))
    except FileExistsError as e:
        fail(f"{what} {out}: {e.strerror}")


_CREATED: set[Path] = set()
"""Stores this process created (`prepare_spec_run`): `discard_if_unused` may remove them again."""


def discard_if_unused(db_path: Path, created: bool | None = None) -> None:
    """A command refused after it created its store (a trace file gone, a second run holding it, a bad
    first file) leaves no store behind: remove the file when this process created it (`created`, else
    what `prepare_spec_run` recorded) and nothing was stored in it. A store that holds anything, or
    that existed before, is never touched."""
    from legival_core.store import Store, StoreError

    if not (created if created is not None else db_path in _CREATED) or not db_path.exists():
        return
    try:
        with Store(db_path, read_only=True) as store:
            if store.holds_data():
                return
    except StoreError:
        return
    from legival_core.outputs import sidecar

    for p in (db_path, sidecar(db_path, "wal")):
        with contextlib.suppress(OSError):
            p.unlink()
    _CREATED.discard(db_path)


def check_infrastructure(s: BenchmarkSpec, spec_file: Path) -> None:
    """Exit with one `error:` line naming the address when the spec's Ray cluster (a `ray_address`
    other than local) or the Prefect API (PREFECT_API_URL) does not answer within the spec's
    `execution.connect_timeout_s`, instead of a flow that waits minutes and dies with tracebacks."""
    from tasks.infra import Unreachable, check_prefect, check_ray

    timeout = s.execution.connect_timeout_s
    try:
        check_ray(s.execution.ray_address, timeout, str(spec_file))
        check_prefect(timeout, str(spec_file))
    except Unreachable as e:
        fail(str(e))


def writable_dir(path: Path, what: str, keep: bool = True) -> Path:
    """Create the output directory `path` now and check that files can be written there, so that an
    unwritable report directory fails (exit 2, naming `what`) before any work, not with a traceback
    after it. `keep=False`: the directories this check created are removed again (a run that is then
    refused leaves nothing; the report creates its directory when it writes)."""
    import tempfile

    made = [p for p in (path, *path.parents) if not p.exists()]
    try:
        path.mkdir(parents=True, exist_ok=True)
        fd, probe = tempfile.mkstemp(prefix=".legival-write-check-", dir=path)  # a name of its own
        os.close(fd)
        os.unlink(probe)
    except OSError as e:
        fail(f"{what} {path}: cannot write there ({e.strerror or e})")
    finally:
        if not keep:
            for p in made:  # deepest first
                with contextlib.suppress(OSError):
                    p.rmdir()
    return path

