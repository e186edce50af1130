"""`model_files.build_once`: one build however many callers race for it, readable, no debris."""

from __future__ import annotations

import threading
import time
from pathlib import Path

import pytest

from legival_core.model_files import build_once, default_cache_dir


def test_concurrent_callers_build_once(tmp_path: Path) -> None:
    builds: list[int] = []

    def build(tmp: Path) -> None:
        builds.append(1)
        time.sleep(0.2)  # a second caller arrives while the first builds
        (tmp / "weights.bin").write_bytes(b"w")

    target = tmp_path / "models" / "m"
    done = [threading.Thread(target=build_once, args=(target, build, lambda p: (p / "weights.bin").is_file()))
            for _ in range(3)]
    for t in done:
        t.start()
    for t in done:
        t.join()
    assert builds == [1] and (target / "weights.bin").read_bytes() == b"w"
    assert sorted(p.name for p in target.parent.iterdir()) == [".m.lock", "m"]


def test_a_failed_build_leaves_nothing(tmp_path: Path) -> None:
    def broken(tmp: Path) -> None:
        (tmp / "half").write_bytes(b"x")
        raise OSError("disk full")

    with pytest.raises(OSError, match="disk full"):
        build_once(tmp_path / "m", broken, lambda p: p.is_dir())
    assert [p.name for p in tmp_path.iterdir()] == [".m.lock"]


def test_cache_dir_from_the_environment(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("LEGIVAL_CACHE_DIR", str(tmp_path))
    assert default_cache_dir() == tmp_path
    monkeypatch.delenv("LEGIVAL_CACHE_DIR")
    assert default_cache_dir() == Path.home() / ".cache" / "legival"
