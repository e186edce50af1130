"""The export of a shipped GGUF reads the file's metadata once (`shipped.gguf_parsed_once`): inside the
block every `gguf.GGUFReader` of a file is the first one, outside it the class is back, and what
transformers loads through the shared reader is what it loads through a fresh one."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import gguf
import numpy as np
import pytest

from legival_core.backends.shipped import ModelNotInstalled, gguf_parsed_once, smollm2_gguf_path


@dataclass(frozen=True)
class InBlock:
    readers: tuple[Any, Any]
    """`gguf.GGUFReader` called twice inside the block, by two spellings of the path."""
    fresh: dict[str, Any]
    """transformers' load of the metadata that made the block's reader."""
    shared: dict[str, Any]
    """The next load, through the same reader."""


@pytest.fixture(scope="module")
def in_block() -> InBlock:
    from transformers.modeling_gguf_pytorch_utils import load_gguf_checkpoint

    try:
        path = smollm2_gguf_path()
    except ModelNotInstalled as e:
        pytest.skip(str(e))
    with gguf_parsed_once():
        fresh = load_gguf_checkpoint(str(path), return_tensors=False)
        shared = load_gguf_checkpoint(path, return_tensors=False)
        readers = (gguf.GGUFReader(path), gguf.GGUFReader(str(path.parent / "." / path.name)))
    return InBlock(readers, fresh, shared)


def test_one_reader_per_file_inside_the_block_only(in_block: InBlock) -> None:
    first, second = in_block.readers
    assert first is second and type(first).__name__ == "GGUFReader"
    assert gguf.GGUFReader is type(first)  # the class is back outside the block


def test_transformers_loads_the_same_through_the_shared_reader(in_block: InBlock) -> None:
    fresh, shared = in_block.fresh, in_block.shared
    assert shared["config"] == fresh["config"] and shared["tokenizer_config"] == fresh["tokenizer_config"]
    assert shared["tokenizer"].keys() == fresh["tokenizer"].keys() and fresh["tokenizer"]["tokens"]
    for key, value in fresh["tokenizer"].items():
        assert np.array_equal(np.asarray(shared["tokenizer"][key], dtype=object), np.asarray(value, dtype=object)), key
