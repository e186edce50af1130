"""How much a zip archive's member inflates to, counted while it is inflated, before the member is handed
to a reader that inflates members whole (Inspect's `.eval` reader: a 1 MB log whose sample member holds
1 GiB of spaces would otherwise keep it busy for minutes, its memory growing all the while).

Nothing a zip says about a member's size is trusted: a member whose directory entry declares more than
the limit is refused without inflating it; any other is inflated, in bounded chunks, and counted, and the
count stops as soon as it passes the limit (a declared size can lie: small in the directory, huge once
inflated). What is inflated is exactly what the archive's reader inflates: the member's directory entry as
Inspect's own zip reader parses it (its offset, compressed size and method), the compressed bytes after
the member's local header, across every zstd frame. Memory: one chunk in, one chunk out, whatever the
member holds. A member that cannot be inflated (damaged data, an unknown method) is not judged here: the
reader says what is wrong with it.
"""

from __future__ import annotations

import io
import struct
import zlib
from dataclasses import dataclass
from pathlib import Path
from typing import Any, BinaryIO

_CHUNK = 1 << 16
"""Compressed bytes read at a time."""
_OUT = 1 << 20
"""Inflated bytes produced at a time, at most."""
STORED, DEFLATE, ZSTD = 0, 8, 93
"""The ZIP compression methods Inspect reads (APPNOTE 4.4.5)."""


@dataclass(frozen=True, slots=True)
class Member:
    """One member as the archive's reader sees it (its directory entry)."""

    name: str
    method: int
    compressed_size: int
    declared_size: int
    """The inflated size its directory entry declares (which can lie)."""
    offset: int
    """Where its local header starts."""


class ZipMembers:
    """An archive's members (read once), and how much each inflates to (`over`). Raises `OSError` or
    `ValueError` for a file that is no readable zip (the reader then says so in its own words)."""

    def __init__(self, path: Path) -> None:
        self.members = {m.name: m for m in _directory(path)}  # a name given twice: its last entry, as readers do
        self._file: BinaryIO = path.open("rb")

    @classmethod
    def of(cls, path: Path) -> ZipMembers | None:
        """The members of the archive at `path`, or None when it is no readable zip (its reader says why)."""
        try:
            return cls(path)
        except Exception:  # noqa: BLE001  whatever the parser raises: the reader will say it in its words
            return None

    def first_over(self, names: tuple[str, ...], limit: int) -> tuple[str, str] | None:
        """(member, why) of the first member named in `names` (a name ending in '/': every member under
        it) that is over `limit` (`over`); None when none is."""
        for name in self.members:
            if name in names or any(name.startswith(d) for d in names if d.endswith("/")):
                why = self.over(name, limit)
                if why is not None:
                    return name, why
        return None

    def over(self, name: str, limit: int) -> str | None:
        """Why member `name` may not be inflated whole: it declares, or inflates to, more than `limit`
        bytes (a phrase); None when it is within the limit, or is no member, or cannot be inflated."""
        m = self.members.get(name)
        if m is None:
            return None
        if m.declared_size > limit:
            return f"declares {m.declared_size:,} bytes once inflated"
        if most_inflated(m) <= limit:
            return None  # it cannot reach the limit: no need to inflate it once more than the reader will
        if inflated_size(self._file, m, limit) > limit:
            return f"inflates to more than {limit:,} bytes (though it declares {m.declared_size:,})"
        return None

    def close(self) -> None:
        self._file.close()

    def __enter__(self) -> ZipMembers:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


DEFLATE_MAX_RATIO = 1032
"""Deflate's largest possible expansion (a 258-byte match per bit pair): a deflate stream of n bytes never
inflates to more than 1032 x n (zlib's technical notes)."""


def most_inflated(m: Member) -> float:
    """The most member `m` can inflate to whatever its directory says: its own size when stored, 1032 x
    for deflate; unbounded for zstd (its ratio has no such limit) and unknown methods."""
    if m.method == STORED:
        return m.compressed_size
    if m.method == DEFLATE:
        return (m.compressed_size + 1) * DEFLATE_MAX_RATIO
    return float("inf")


def inflated_size(f: BinaryIO, m: Member, limit: int) -> int:
    """The bytes member `m` of the open archive `f` inflates to, counted up to the first chunk past
    `limit` (then more than `limit`). A member that cannot be inflated counts what came out before."""
    f.seek(m.offset)
    local = f.read(30)
    if len(local) < 30 or local[:4] != b"PK\x03\x04":
        return 0  # no local header there: the reader reports it
    name_len, extra_len = struct.unpack("<HH", local[26:30])
    f.seek(m.offset + 30 + name_len + extra_len)
    source = _Range(f, m.compressed_size)
    if m.method == STORED:
        return _count(iter(lambda: source.read(_OUT), b""), limit)
    if m.method == DEFLATE:
        return _count(_inflate(source), limit)
    if m.method == ZSTD:
        import zstandard

        reader = zstandard.ZstdDecompressor().stream_reader(source, read_size=_CHUNK,  # type: ignore[arg-type]
                                                            read_across_frames=True, closefd=False)
        return _count(iter(lambda: reader.read(_OUT), b""), limit)
    return 0  # a method the reader does not know: it says so


def _count(chunks: Any, limit: int) -> int:
    n = 0
    try:
        for chunk in chunks:
            n += len(chunk)
            if n > limit:
                break
    except (zlib.error, OSError, ValueError, zstd_error()):
        pass  # damaged: the reader says what is wrong with it
    return n


def _inflate(source: _Range) -> Any:
    """The inflated chunks of raw deflate data, none longer than `_OUT` (one call's output is bounded:
    `max_length`, the rest kept as `unconsumed_tail`)."""
    d = zlib.decompressobj(-15)
    while not d.eof:
        data = d.unconsumed_tail or source.read(_CHUNK)
        if not data:
            return
        out = d.decompress(data, _OUT)
        if out:
            yield out
        elif not d.unconsumed_tail and not source.remaining:
            return


class _Range(io.RawIOBase):
    """The next `size` bytes of `f` (a member's compressed bytes), or fewer where the file ends."""

    def __init__(self, f: BinaryIO, size: int) -> None:
        self._f, self.remaining = f, max(0, size)

    def readable(self) -> bool:
        return True

    def read(self, n: int = -1) -> bytes:
        n = self.remaining if n is None or n < 0 else min(n, self.remaining)
        data = self._f.read(n) if n else b""
        self.remaining = 0 if len(data) < n else self.remaining - len(data)
        return data

    def readinto(self, b: Any) -> int:
        data = self.read(len(b))
        b[: len(data)] = data
        return len(data)


def zstd_error() -> type[Exception]:
    """zstandard's error class (OSError where zstandard is missing), for an `except` tuple."""
    try:
        import zstandard
    except ImportError:  # pragma: no cover - a base dependency
        return OSError
    err: type[Exception] = zstandard.ZstdError
    return err


def _directory(path: Path) -> list[Member]:
    """The archive's directory as Inspect's own zip reader parses it (the entries it will read), else as
    the standard library does (an Inspect whose reader moved: the same format, read by another parser)."""
    try:  # run as Inspect runs its own reads (read_eval_log_samples_by_id), wherever it is called from
        from inspect_ai._util._async import run_coroutine
        from inspect_ai._util.async_zip import AsyncZipReader
        from inspect_ai._util.asyncfiles import get_async_filesystem
    except ImportError:
        return _stdlib_directory(path)

    async def entries() -> list[Any]:
        return list((await AsyncZipReader(get_async_filesystem(), str(path)).entries()).entries)

    return [Member(e.filename, int(e.compression_method), e.compressed_size, e.uncompressed_size,
                   e.local_header_offset) for e in run_coroutine(entries())]


def _stdlib_directory(path: Path) -> list[Member]:
    import zipfile

    with zipfile.ZipFile(path) as z:
        return [Member(i.filename, i.compress_type, i.compress_size, i.file_size, i.header_offset)
                for i in z.infolist()]
