"""Opening a user's input file whatever holds it: what it is, told by its first bytes (never by its
name alone), and its lines, decompressed while they are read.

Trace dumps are large and usually compressed, so gzip and zstd streams are read transparently, line
by line: a multi-GB file is never held whole, compressed or not. Anything else (a zip, tar or 7-Zip
archive, bzip2/xz/LZ4 data, a Parquet file where JSONL is read, a database, other binary data) is
refused before a line is read, with ONE sentence naming the file, what it is, and what is read here,
instead of an encoding error about byte 0x8b of line 1. A compressed stream that ends early (a
truncated copy) or is corrupt is an error naming the line reached: its first lines are never taken
for the whole file. One line is held to `ingest.max_record_bytes` (`record_limit`), counted while it is
read: a gzip line that inflates to a GiB is refused at the limit, in a fraction of a second. A named pipe
is waited on in short polls (standard error says so, a signal ends the wait); a socket or a block device
is refused, and a reader that seeks gets `regular_file_error` for any of them.

Every reader of a user's record file goes through here (`legival ingest`'s trace files, the dataset
loaders of `legival generate --problems`), so a new input source (issue 40) opens its files the same
way. `InputFileError` is about the whole file; the callers turn it into their own error types.
"""

from __future__ import annotations

import gzip
import io
import os
import select
import stat
import sys
import zlib
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from contextvars import ContextVar
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from legival_core.readers.zip_members import zstd_error

Compression = Literal["gzip", "zstd"]
PARQUET_SUFFIXES = (".parquet", ".pq")

_GZIP = b"\x1f\x8b"
_ZSTD = b"\x28\xb5\x2f\xfd"
_PARQUET = b"PAR1"
_BOM = b"\xef\xbb\xbf"
_HEAD = 512
"""Bytes read to tell what a file is (a tar header's magic sits at offset 257)."""
_CHUNK = 1 << 16
_ZSTD_SLICE = 1 << 12
"""Compressed bytes handed to the zstd decompressor at a time: what one call returns is bounded by
what this much input can expand to, however well the data compressed."""
MAX_RECORD_BYTES = 64 << 20
"""The spec's default `ingest.max_record_bytes`: what one record of an input may take once decompressed
(a line of a JSONL file, a member of an Inspect `.eval` log). A trace is at most `ingest.max_trace_bytes`
(2 MB); a line of 64 MiB is no trace record but a decompression bomb, or a file without line breaks."""
_RECORD_LIMIT: ContextVar[int] = ContextVar("record_limit", default=MAX_RECORD_BYTES)
_FIFO_GRACE_S = 0.2
"""How long a named pipe may stay silent before standard error says what is being waited for."""
_FIFO_POLL_MS = 250
"""The wait for a pipe's writer, in slices this long: a signal's Python handler runs between two."""

_EXTRACT = "extract it and give the files in it"
_RECOMPRESS = "decompress it, or recompress it with gzip or zstd"
_CONTAINERS: tuple[tuple[int, bytes, str, str], ...] = (
    # (offset, magic, what the file is, what to do about it)
    (0, b"PK\x03\x04", "a zip archive", _EXTRACT),
    (0, b"PK\x05\x06", "a zip archive (an empty one)", _EXTRACT),
    (0, b"PK\x07\x08", "a zip archive", _EXTRACT),
    (0, b"7z\xbc\xaf\x27\x1c", "a 7-Zip archive", _EXTRACT),
    (257, b"ustar", "a tar archive", _EXTRACT),
    (0, b"BZh", "bzip2-compressed data", _RECOMPRESS),
    (0, b"\xfd7zXZ\x00", "xz-compressed data", _RECOMPRESS),
    (0, b"\x04\x22\x4d\x18", "LZ4-compressed data", _RECOMPRESS),
    (0, b"SQLite format 3\x00", "an SQLite database", "export its records as JSONL"),
    (8, b"DUCK", "a DuckDB database (a Legi-Val store is given with --db)", "export its records as JSONL"),
    (0, b"ARROW1", "an Arrow IPC (Feather) file", "write it as Parquet or JSONL"),
)


@contextmanager
def record_limit(limit: int) -> Iterator[None]:
    """Within the block, every reader of a user's input holds one record to `limit` bytes, decompressed
    (`ingest.max_record_bytes`: the ingest stage sets it around its reading; elsewhere the default)."""
    token = _RECORD_LIMIT.set(limit)
    try:
        yield
    finally:
        _RECORD_LIMIT.reset(token)


def current_record_limit() -> int:
    """The limit of one record in force (`record_limit`)."""
    return _RECORD_LIMIT.get()


LIMIT_NAME = "the limit of one record (ingest.max_record_bytes, --max-record-bytes)"


_SPECIAL = ((stat.S_ISFIFO, "a named pipe (FIFO)"), (stat.S_ISSOCK, "a socket"),
            (stat.S_ISCHR, "a character device"), (stat.S_ISBLK, "a block device"))


def special_file(path: Path) -> str | None:
    """What `path` is when it exists and is neither a regular file nor a directory ("a named pipe
    (FIFO)", "a socket", "a character device", "a block device"); None otherwise. Never opens it."""
    try:
        mode = os.stat(path).st_mode
    except (OSError, ValueError):
        return None
    return next((what for test, what in _SPECIAL if test(mode)), None)


def regular_file_error(path: Path, needs: str) -> InputFileError | None:
    """The error for a reader that needs a regular file (it seeks, or reads the file twice) given a
    pipe, a socket or a device (`needs`: why), else None."""
    what = special_file(path)
    if what is None:
        return None
    return InputFileError(str(path), f"is {what}, not a regular file: {needs} (copy what it holds to a file "
                                     f"first: cat {path} > FILE)")


class InputFileError(ValueError):
    """An input file that cannot be read at all (not one bad line of it): `file` and `message`."""

    def __init__(self, file: str, message: str) -> None:
        super().__init__(f"{file}: {message}")
        self.file, self.message = file, message


@dataclass(frozen=True, slots=True)
class InputFormat:
    """What a file holds: text lines (JSONL), plain or compressed, or a Parquet file."""

    kind: Literal["lines", "parquet"]
    compression: Compression | None = None


def supported(parquet: bool) -> str:
    """What is read, as the end of an error message."""
    return "this command reads JSONL, plain or compressed with gzip or zstd" + (", and Parquet" if parquet else "")


COMPRESSED_SUFFIXES = (".gz", ".gzip", ".zst", ".zstd")


def is_parquet_name(path: Path) -> bool:
    return path.suffix.lower() in PARQUET_SUFFIXES


def input_stem(path: Path) -> str:
    """The file's stem without its compression suffix: `test.jsonl.gz` -> `test`, as `test.jsonl`
    (a loader that names its problems after the file names them the same whether compressed or not)."""
    name = Path(path)
    if name.suffix.lower() in COMPRESSED_SUFFIXES:
        name = Path(name.stem)
    return name.stem


class InputFile:
    """An opened input file: its `format` and, for text, its decompressed lines, read once. The file
    is opened once and its first bytes are replayed, so a pipe (`legival ingest <(zcat ...)`) reads
    as well as a regular file."""

    def __init__(self, path: Path, fmt: InputFormat, stream: io.BufferedIOBase | None, opened: ExitStack) -> None:
        self.path, self.format = path, fmt
        self._stream, self._opened = stream, opened

    def lines(self) -> Iterator[tuple[int, bytes]]:
        """(1-based line number, the line's bytes without its newline) for every line, read as a
        stream; a UTF-8 byte order mark at the start is dropped. A compressed stream that ends early
        or is corrupt raises `InputFileError` naming the last line read whole (yielded before); so does
        a line longer than the limit of one record (`record_limit`), as soon as the limit is passed:
        a line is never held beyond it, however much a compressed stream would inflate to."""
        name, compression, stream = str(self.path), self.format.compression, self._stream
        if stream is None:
            raise InputFileError(name, "is a Parquet file, not lines of text")
        self._stream = None  # read once
        limit = current_record_limit()
        line = 0
        try:
            with self._opened:
                while raw := stream.readline(limit + 1):
                    if len(raw) > limit and not raw.endswith(b"\n"):  # limit + 1 bytes, and the line goes on
                        line += 1
                        raise InputFileError(name, f"line {line} holds more than {limit:,} bytes"
                                                   f"{' once decompressed' if compression else ''}, over {LIMIT_NAME}: "
                                                   "no trace record is that long (a decompression bomb? a file "
                                                   "without line breaks?); nothing after it was read")
                    line += 1
                    if line == 1 and raw.startswith(_BOM):
                        raw = raw[len(_BOM):]
                    yield line, raw[:-1] if raw.endswith(b"\n") else raw
        except EOFError:
            raise InputFileError(name, f"the {compression} stream ends early, {_reached(line)} (a truncated "
                                       "file? what follows could not be read)") from None
        except (OSError, zlib.error, zstd_error()) as e:
            what = f"the {compression} stream is corrupt" if compression else "cannot read it"
            detail = getattr(e, "strerror", None) or e
            raise InputFileError(name, f"{what}, {_reached(line)} ({detail})") from None

    def close(self) -> None:
        self._stream = None
        self._opened.close()

    def __enter__(self) -> InputFile:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def open_input(path: Path, parquet: bool = False) -> InputFile:
    """`path` opened, and what it holds told from its first bytes (decompressed ones too: a .tar.gz
    is an archive): text lines, or a Parquet file where `parquet` is accepted (its rows are then read
    by name, and nothing is left open). Anything else, a missing file, a directory or an unreadable
    one raises `InputFileError` saying what it is and what is read. A Parquet file must be named
    *.parquet or *.pq and a file so named must be Parquet (its records are numbered by row, a JSONL
    file's by line); an empty file is an empty JSONL file."""
    name = str(path)
    if not path.exists():
        raise InputFileError(name, "no such file")
    if path.is_dir():
        what = "JSONL or Parquet files" if parquet else "JSONL files"
        raise InputFileError(name, f"is a directory, not a file (give the {what} in it)")
    special = special_file(path)
    if special in ("a socket", "a block device"):
        raise InputFileError(name, f"is {special}, not a file ({supported(parquet)}: from a file or a pipe)")
    if parquet and is_parquet_name(path) and (err := regular_file_error(
            path, "Parquet is read by seeking in it (its footer, at its end, says where its rows are)")):
        raise err
    opened = ExitStack()
    try:
        fmt, stream = _open(path, parquet, opened)
    except BaseException:
        opened.close()
        raise
    if stream is None:
        opened.close()
    return InputFile(path, fmt, stream, opened)


def sniff(path: Path, parquet: bool = False) -> InputFormat:
    """What `path` holds (`open_input`), reading its first bytes only."""
    with open_input(path, parquet) as f:
        return f.format


def read_lines(path: Path) -> Iterator[tuple[int, bytes]]:
    """`InputFile.lines` of a JSONL file, plain or compressed (anything else: `InputFileError`)."""
    with open_input(path) as f:
        yield from f.lines()


def text_lines(path: Path) -> Iterator[str]:
    """`read_lines` decoded as UTF-8, each with its newline (what `csv` reads: a quoted cell may span
    lines); a byte that is not UTF-8 is a ValueError naming the line and column."""
    for line, raw in read_lines(path):
        try:
            yield raw.decode("utf-8") + "\n"
        except UnicodeDecodeError as e:
            raise ValueError(f"{path}:{line}: invalid UTF-8 byte 0x{raw[e.start]:02x} at column "
                             f"{e.start + 1}") from None


def _reached(line: int) -> str:
    return f"after line {line}" if line else "before the end of line 1"


def _open(path: Path, parquet: bool, opened: ExitStack) -> tuple[InputFormat, io.BufferedIOBase | None]:
    name = str(path)
    try:
        f = opened.enter_context(_open_fifo(path) if special_file(path) == "a named pipe (FIFO)" else path.open("rb"))
        head = f.read(_HEAD)
    except OSError as e:
        raise InputFileError(name, f"cannot read it ({e.strerror or e})") from None
    stream: io.BufferedIOBase = io.BufferedReader(_Replay(head, f), _CHUNK)
    compression: Compression | None = "gzip" if head.startswith(_GZIP) else "zstd" if head.startswith(_ZSTD) else None
    if compression is not None:
        inner = opened.enter_context(gzip.GzipFile(fileobj=stream) if compression == "gzip" else
                                     io.BufferedReader(_ZstdReader(stream), _CHUNK))
        head, cut = _first_bytes(inner)
        if cut is not None and not isinstance(cut, EOFError):
            raise InputFileError(name, f"is {compression}-compressed data that cannot be decompressed ({cut})")
        stream = io.BufferedReader(_Replay(head, inner, cut), _CHUNK)  # an early end: raised after the head
    inside = _describe(head)
    if inside == "parquet":
        if compression:
            inside = ("Parquet", "decompress it: Parquet compresses its own columns")
        elif not parquet:
            inside = ("a Parquet file", "write its rows as JSONL")
        elif not is_parquet_name(path):
            raise InputFileError(name, "is a Parquet file named like JSONL: name it *.parquet (or *.pq) to read "
                                       "it as Parquet, its records numbered by row")
        else:
            return InputFormat("parquet"), None
    if inside is not None:
        what, todo = inside
        held = what
        if compression:
            article, _, rest = what.partition(" ")
            held = (f"a {compression}-compressed {rest}" if article in ("a", "an") else
                    f"{compression}-compressed {what}")
        raise InputFileError(name, f"is {held}, which is not read here ({todo}; {supported(parquet)})")
    if parquet and is_parquet_name(path) and head:
        held = f"{compression}-compressed text" if compression else "text"
        raise InputFileError(name, f"is named like Parquet but holds {held}, not Parquet (JSONL? name it "
                                   f"*.jsonl{'.gz' if compression == 'gzip' else '.zst' if compression else ''})")
    return InputFormat("lines", compression), stream


def _open_fifo(path: Path) -> io.BufferedReader:
    """A named pipe opened for reading without blocking in C: opened at once (non-blocking), then waited
    on in short polls until a writer has written or gone, so that a signal's Python handler runs while
    it waits (Ctrl-C, SIGTERM end the command); standard error says what is waited for when it lasts."""
    fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK)
    try:
        poll = select.poll()
        poll.register(fd, select.POLLIN | select.POLLHUP)
        if not poll.poll(int(_FIFO_GRACE_S * 1000)):
            print(f"{path}: a named pipe (FIFO) that nothing has written to yet: waiting for a writer "
                  "(Ctrl-C stops)", file=sys.stderr, flush=True)
            while not poll.poll(_FIFO_POLL_MS):
                pass
        os.set_blocking(fd, True)
        return open(fd, "rb", closefd=True)  # noqa: SIM115  closed by the caller's ExitStack
    except BaseException:
        os.close(fd)
        raise


def _first_bytes(stream: io.BufferedIOBase) -> tuple[bytes, Exception | None]:
    """Up to `_HEAD` decompressed bytes, and the error that stopped the stream before (None: none)."""
    head = b""
    try:
        while len(head) < _HEAD:
            got = stream.read1(_HEAD - len(head))
            if not got:
                break
            head += got
    except (OSError, EOFError, zlib.error, zstd_error()) as e:
        return head, e
    return head, None


class _Replay(io.RawIOBase):
    """Bytes already read from a stream, then the rest of it (a pipe cannot be read twice), then
    `error` if one stopped the first read (it belongs where the bytes ran out, not before them)."""

    def __init__(self, head: bytes, rest: io.BufferedIOBase, error: Exception | None = None) -> None:
        self._head, self._rest, self._error = memoryview(head), rest, error

    def readable(self) -> bool:
        return True

    def readinto(self, b: Any) -> int:
        if self._head:
            n = min(len(b), len(self._head))
            b[:n] = self._head[:n]
            self._head = self._head[n:]
            return n
        if self._error is not None:
            raise self._error
        got = self._rest.read1(len(b))
        b[:len(got)] = got
        return len(got)


def _describe(head: bytes) -> Literal["parquet"] | tuple[str, str] | None:
    """What a file's first bytes say it is: 'parquet', (what, what to do) for a container that is not
    read, None for text (JSONL, or text that its lines' own errors will describe)."""
    if head.startswith(_PARQUET):
        return "parquet"
    for offset, magic, what, todo in _CONTAINERS:
        if head[offset:offset + len(magic)] == magic:
            return what, todo
    if head.startswith((_GZIP, _ZSTD)):
        return "data compressed twice", "decompress one layer: one is read"
    if head.startswith((b"\xff\xfe", b"\xfe\xff")) or head[:2] in (b"{\x00", b"\x00{"):
        return "UTF-16 text", "save it as UTF-8"
    if _binary(head):
        return "binary data", "check that it is the file you meant"
    return None


def _binary(head: bytes) -> bool:
    """Bytes that are no text: NUL bytes or invalid UTF-8 in a head that does not start like a JSON
    object (a JSONL file with a damaged line still starts with '{': its lines report their errors)."""
    body = head.removeprefix(_BOM).lstrip()
    if body.startswith(b"{"):
        return False
    if b"\x00" in head:
        return True
    try:
        head.decode("utf-8")
    except UnicodeDecodeError as e:
        return e.reason != "unexpected end of data"  # that one: a character cut by the end of the head
    return False


class _ZstdReader(io.RawIOBase):
    """A zstd stream's decompressed bytes, frame after frame, with an `EOFError` when the file ends
    inside a frame (zstandard's own stream reader takes a cut-off frame for the end of the data)."""

    def __init__(self, f: io.BufferedIOBase) -> None:
        import zstandard

        self._f = f
        self._dctx = zstandard.ZstdDecompressor()
        self._obj: Any = None
        self._pending = b""
        self._out = memoryview(b"")

    def readable(self) -> bool:
        return True

    def readinto(self, b: Any) -> int:
        while not self._out:
            if not self._pending:
                self._pending = self._f.read1(_CHUNK)
                if not self._pending:
                    if self._obj is not None and not self._obj.eof:
                        raise EOFError("the zstd stream ended before the end of its frame")
                    return 0
            if self._obj is None or self._obj.eof:
                self._obj = self._dctx.decompressobj()
            piece, self._pending = self._pending[:_ZSTD_SLICE], self._pending[_ZSTD_SLICE:]
            self._out = memoryview(self._obj.decompress(piece))
            if self._obj.eof:  # the frame ended inside this piece: the rest starts the next frame
                self._pending = self._obj.unused_data + self._pending
        n = min(len(b), len(self._out))
        b[:n] = self._out[:n]
        self._out = self._out[n:]
        return n

