"""`readers.zip_members` (issue 45 item 3): how much a zip member inflates to, counted while it is
inflated in bounded chunks, never trusting the sizes the archive declares; through Inspect's own
directory parser (what Inspect will read) and the standard library's (where Inspect's moved)."""

from __future__ import annotations

import tracemalloc
import zlib
from pathlib import Path

import pytest

from legival_core.readers import zip_members
from legival_core.readers.zip_members import ZipMembers
from tests._zips import padded, write_zip

GIB = 1 << 30
TEXT = b'{"id": 1, "answer": "42"}'


@pytest.fixture(params=["inspect", "stdlib"])
def parser(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> str:
    if request.param == "inspect":
        pytest.importorskip("inspect_ai")
    else:
        monkeypatch.setattr(zip_members, "_directory", zip_members._stdlib_directory)
    return str(request.param)


def archive(tmp_path: Path) -> Path:
    small = zlib.compressobj(6, zlib.DEFLATED, -15)
    raw = small.compress(TEXT) + small.flush()
    honest = padded(TEXT, GIB, 8)
    lying = padded(TEXT, GIB, 93)
    return write_zip(tmp_path / "a.zip", [
        ("small.json", 8, raw, zlib.crc32(TEXT), len(TEXT)),
        ("stored.json", 0, TEXT, zlib.crc32(TEXT), len(TEXT)),
        ("stored-lying.json", 0, TEXT, zlib.crc32(TEXT), 5),
        ("honest.json", 8, honest[0], honest[1], honest[2]),
        ("declared-only.json", 8, b"\xff" * 40, 0, GIB),  # refused by its declaration alone, never inflated
        ("lying-zstd.json", 93, lying[0], zlib.crc32(TEXT), len(TEXT)),
        ("lying-deflate.json", 8, padded(TEXT, GIB, 8)[0], zlib.crc32(TEXT), len(TEXT)),
        ("damaged.json", 8, b"\xff" * 40, 0, 10),
        ("unknown-method.json", 12, b"BZh9" + b"\0" * 20, 0, 10),
    ])


def test_members_within_the_limit_pass_and_members_over_it_say_why(tmp_path: Path, parser: str) -> None:
    with ZipMembers(archive(tmp_path)) as m:
        assert [m.over(n, 1000) for n in ("small.json", "stored.json", "damaged.json", "unknown-method.json",
                                          "not-a-member.json")] == [None] * 5
        assert m.over("stored.json", 10) == f"declares {len(TEXT)} bytes once inflated"
        assert m.over("stored-lying.json", 10) == "inflates to more than 10 bytes (though it declares 5)"
        assert m.over("honest.json", 64 << 20) == f"declares {GIB + len(TEXT):,} bytes once inflated"
        assert m.over("declared-only.json", 64 << 20) == f"declares {GIB:,} bytes once inflated"
        for name in ("lying-zstd.json", "lying-deflate.json"):
            assert m.over(name, 64 << 20) == f"inflates to more than 67,108,864 bytes (though it declares {len(TEXT)})"
            assert m.over(name, 2 * GIB) is None  # counted to its true end: 1 GiB and a few bytes
        assert m.first_over(("small.json", "lying/", "lying-zstd.json"), 1000) is not None
        assert m.first_over(("small.json", "stored.json"), 1000) is None


def test_counting_a_gib_holds_one_chunk_at_a_time(tmp_path: Path) -> None:
    path = archive(tmp_path)
    with ZipMembers(path) as m:
        tracemalloc.start()
        try:
            assert m.over("lying-deflate.json", GIB - 1) is not None  # inflated to its end: more than GIB - 1
            assert m.over("lying-zstd.json", GIB - 1) is not None
            peak = tracemalloc.get_traced_memory()[1]
        finally:
            tracemalloc.stop()
    assert peak < 8 << 20, peak


def test_no_zip_is_none(tmp_path: Path) -> None:
    f = tmp_path / "x.eval"
    f.write_bytes(b"PK\x03\x04 cut short")
    assert ZipMembers.of(f) is None


@pytest.mark.parametrize("data", [b"\0" * 20_000_000, bytes(range(256)) * 4_000, b"x"],
                         ids=["max-ratio", "varied", "one-byte"])
@pytest.mark.parametrize(("method", "level"), [(8, 9), (8, 0), (0, None)], ids=["deflate-9", "deflate-0", "stored"])
def test_the_bound_that_spares_a_second_inflate_is_never_below_what_a_member_inflates_to(
        tmp_path: Path, data: bytes, method: int, level: int | None) -> None:
    """`most_inflated` lets `over` skip counting a member that cannot reach the limit: it must hold for
    deflate's best ratio (zeros at level 9, ~1000:1) as for any other stream, and for a stored member."""
    import zipfile

    path = tmp_path / "a.zip"
    with zipfile.ZipFile(path, "w", method, compresslevel=level) as z:
        z.writestr("m", data)
    with ZipMembers(path) as members:
        (m,) = members.members.values()
        assert m.method == method and len(data) <= zip_members.most_inflated(m)
        assert members.over("m", len(data)) is None and members.over("m", len(data) - 1) is not None
