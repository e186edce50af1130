"""Participant and admin tokens (docs/study.md "Tokens and the key file"): derived, never stored.

A study has one random secret key (`secrets.token_bytes(32)`) in a key file beside the store,
`<db>.studies/<name>.key`, mode 0600. A token is the URL-safe base64 (no padding) of
HMAC-SHA256(key, name NUL code) cut to 128 bits: anyone holding the key file can print the links again
(`study serve` does), and the store alone cannot: it holds each participant's code and the SHA-256 of
their token (the server looks a token up by its hash), never a token. A copy of the store handed to an
analyst therefore opens no participant's session. A key file that group or others can read is refused.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import os
import secrets
import stat
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from legival_core.store.db import Store

KEY_BYTES = 32
TOKEN_BITS = 128
ADMIN_CODE = "admin"
"""The admin's code in `study_participants` (a participant's is P01, P02, ...)."""


class KeyFileError(ValueError):
    """A key file that is missing, unsafe or damaged; the message says how to fix it."""


def key_path(db: str | Path, name: str) -> Path:
    """`<db>.studies/<name>.key`, in the store's key folder beside it (`legival_core.outputs.sidecar`)."""
    from legival_core.outputs import sidecar

    return sidecar(db, "studies") / f"{name}.key"


def _check_folder(folder: Path) -> None:
    """A key folder that group or others may read, write or enter is refused like a key file: whoever
    may write it can swap a key file, whoever may list it learns the study names."""
    try:
        mode = stat.S_IMODE(folder.stat().st_mode)
    except FileNotFoundError:
        return
    if mode & 0o077:
        raise KeyFileError(f"{folder}: the key folder is open to group or others (mode {mode:04o}); "
                           f"fix with `chmod 700 {folder}`")


def create_key(path: Path) -> bytes:
    """A new random key written to `path` with mode 0600 (its folder 0700), replacing none: an existing
    file is refused (`FileExistsError`; the caller says why). Created 0600 from the start (no moment
    where others could read it)."""
    _check_folder(path.parent)
    path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
    key = secrets.token_bytes(KEY_BYTES)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    try:
        os.fchmod(fd, 0o600)
        os.write(fd, key)
        os.fsync(fd)
    finally:
        os.close(fd)
    return key


def load_key(path: Path) -> bytes:
    """The key in `path`, refused when group or others may read or write it, or when it is not a key."""
    _check_folder(path.parent)
    try:
        st = path.stat()
    except FileNotFoundError as e:
        raise KeyFileError(f"{path}: no key file: the study's links derive from it (it is created by "
                           "`legival study create` beside the store; a store copied without it has no links)") from e
    if stat.S_IMODE(st.st_mode) & 0o077:
        raise KeyFileError(f"{path}: readable or writable by group or others (mode {stat.S_IMODE(st.st_mode):04o}); "
                           f"whoever reads it can open every participant's session: fix with `chmod 600 {path}`")
    key = path.read_bytes()
    if len(key) != KEY_BYTES:
        raise KeyFileError(f"{path}: holds {len(key)} bytes, not a study key of {KEY_BYTES}: damaged or not a key file")
    return key


def check_key(key: bytes, study: str, hashes: Mapping[str, str], path: Path) -> None:
    """Refuse a key that does not derive the tokens the store knows (`hashes`: code -> stored SHA-256):
    a key file replaced by another (or by random bytes) would otherwise serve and export a study whose
    every link is dead. The admin's and one participant's hash suffice: one key derives them all."""
    codes = [ADMIN_CODE] if ADMIN_CODE in hashes else []
    codes += [c for c in sorted(hashes) if c != ADMIN_CODE][:1]
    for code in codes:
        if not hmac.compare_digest(token_sha256(token(key, study, code)), hashes[code]):
            raise KeyFileError(f"{path}: the key file does not match study {study} (its links would not open): "
                               "restore the key file the study was created with")


def study_key(store: Store, study: str) -> bytes:
    """The key of a stored study, from its file beside the store, checked safe (`load_key`) and
    checked to be the study's (`check_key`): what `study serve`, `export` and `import` use."""
    from legival_core.store.study import token_hashes

    path = key_path(store.path, study)
    key = load_key(path)
    check_key(key, study, token_hashes(store, study), path)
    return key


def token(key: bytes, study: str, code: str) -> str:
    """The token of participant `code` (or `ADMIN_CODE`) in study `study`."""
    digest = hmac.new(key, f"{study}\x00{code}".encode(), hashlib.sha256).digest()[: TOKEN_BITS // 8]
    return base64.urlsafe_b64encode(digest).rstrip(b"=").decode("ascii")


def token_sha256(tok: str) -> str:
    """What the store keeps of a token (hex SHA-256), to find its participant from a request."""
    return hashlib.sha256(tok.encode("ascii", errors="replace")).hexdigest()


def participant_link(tok: str) -> str:
    return f"/p/{tok}"


def admin_link(tok: str) -> str:
    return f"/admin/{tok}"
