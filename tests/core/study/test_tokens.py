"""Participant tokens (legival_core/study/links.py): derived from the key file, stable, never stored."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from legival_core.store import Store
from legival_core.store import study as reads
from legival_core.study.links import (
    ADMIN_CODE,
    KeyFileError,
    create_key,
    key_path,
    load_key,
    token,
    token_sha256,
)
from tests._cli import legival
from tests.core.study.helpers import make_store


def test_tokens_are_derived_stable_and_distinct(tmp_path: Path) -> None:
    path = key_path(tmp_path / "s.duckdb", "pilot")
    assert path == tmp_path / "s.duckdb.studies" / "pilot.key"
    key = create_key(path)
    assert load_key(path) == key and len(key) == 32
    a = token(key, "pilot", "P01")
    assert a == token(load_key(path), "pilot", "P01")  # derived again from the file: stable
    assert len({a, token(key, "pilot", "P02"), token(key, "other", "P01"), token(b"x" * 32, "pilot", "P01")}) == 4
    assert len(a) == 22 and set(a) <= set("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_")


def test_the_key_file_is_0600_and_refused_when_others_can_read_it(tmp_path: Path) -> None:
    path = key_path(tmp_path / "s.duckdb", "pilot")
    create_key(path)
    assert path.stat().st_mode & 0o777 == 0o600
    os.chmod(path, 0o644)
    with pytest.raises(KeyFileError, match=r"mode 0644.*chmod 600"):
        load_key(path)
    os.chmod(path, 0o600)
    path.write_bytes(b"short")
    with pytest.raises(KeyFileError, match="5 bytes"):
        load_key(path)
    with pytest.raises(KeyFileError, match="no key file"):
        load_key(tmp_path / "none.key")


def test_no_token_reaches_the_store_file_and_each_is_found_by_its_hash(tmp_path: Path) -> None:
    db = make_store(tmp_path / "s.duckdb", n_problems=20, stating=range(0, 20, 2))
    r = legival("study", "create", "--db", str(db), "--name", "pilot", "--problems", "12", "--participants", "4")
    assert r.returncode == 0, r.stderr
    key = load_key(key_path(db, "pilot"))
    tokens = {c: token(key, "pilot", c) for c in ("P1", "P01", "P02", "P03", "P04", ADMIN_CODE)}
    printed = r.stdout.split("\n{")[0]
    for c in ("P01", "P02", "P03", "P04"):
        assert f"/p/{tokens[c]}" in printed
    assert f"/admin/{tokens[ADMIN_CODE]}" in printed and tokens["P1"] not in printed
    assert not any(t in r.summary().__repr__() for t in tokens.values())  # the JSON line holds no token
    with Store(db) as store:
        for c in ("P01", "P04", ADMIN_CODE):
            who = reads.participant_by_token_hash(store, token_sha256(tokens[c]))
            assert who == reads.Participant("pilot", c, c == ADMIN_CODE)
        assert reads.participant_by_token_hash(store, token_sha256("forged")) is None
    data = b"".join(p.read_bytes() for p in tmp_path.iterdir() if p.is_file())
    assert data and token_sha256(tokens["P01"]).encode() in data  # the hashes are there...
    for t in tokens.values():
        assert t.encode() not in data  # ...never a token
