"""Zip archives as a hostile input has them (issue 45): members whose declared sizes say what the test
wants (true or false), and members that inflate to a GiB from about a MB, made in a fraction of a second."""

from __future__ import annotations

import struct
import zlib
from pathlib import Path

import zstandard

Member = tuple[str, int, bytes, int, int]
"""(name, method: 0 stored, 8 deflate, 93 zstd, compressed bytes, crc, declared inflated size)."""


def write_zip(path: Path, members: list[Member]) -> Path:
    """A zip of `members`, its local headers and directory saying what they are given (a size may lie)."""
    body, central = bytearray(), bytearray()
    for name, method, raw, crc, size in members:
        n = name.encode()
        central += struct.pack("<IHHHHHHIIIHHHHHII", 0x02014B50, 63, 63, 0x800, method, 0, 0x21, crc, len(raw), size,
                               len(n), 0, 0, 0, 0, 0, len(body)) + n
        body += struct.pack("<IHHHHHIIIHH", 0x04034B50, 63, 0x800, method, 0, 0x21, crc, len(raw), size, len(n), 0) + n
        body += raw
    end = struct.pack("<IHHHHIIH", 0x06054B50, 0, 0, len(members), len(members), len(central), len(body), 0)
    path.write_bytes(bytes(body + central + end))
    return path


def padded(text: bytes, spaces: int, method: int) -> tuple[bytes, int, int]:
    """`text` (a JSON object or array) with `spaces` spaces after its `{` or `[` (the same JSON),
    compressed with `method` (8 deflate, 93 zstd) in a fraction of a second whatever `spaces` is (one
    compressed MiB repeated): (compressed bytes, crc, size). 1 GiB of spaces is about 1 MB compressed."""
    assert text.startswith((b"{", b"["))
    head, tail, mib = text[:1], text[1:], b" " * (1 << 20)
    whole, rest = divmod(spaces, len(mib))
    crc = zlib.crc32(head)
    for _ in range(whole):
        crc = zlib.crc32(mib, crc)
    crc = zlib.crc32(tail, zlib.crc32(b" " * rest, crc))
    if method == 93:
        z = zstandard.ZstdCompressor().compressobj()
        parts = [z.compress(head)] + [z.compress(mib) for _ in range(whole)] + [z.compress(b" " * rest + tail), z.flush()]
        return b"".join(parts), crc, spaces + len(text)
    d = zlib.compressobj(9, zlib.DEFLATED, -15)
    first = d.compress(head) + d.flush(zlib.Z_FULL_FLUSH)
    block = d.compress(mib) + d.flush(zlib.Z_FULL_FLUSH)  # after a full flush: the same bytes for every MiB
    parts = [first, block * whole, d.compress(b" " * rest + tail) + d.flush()]
    return b"".join(parts), crc, spaces + len(text)
