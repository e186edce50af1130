"""KV-cache plumbing for the embedded backend: per-layer key/value views, cropping a shared prefix,
and a cache class that decodes a batch of rows into preallocated buffers (no re-concatenation per
token). transformers' cache classes are imported only when the embedded backend runs."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import torch


def layer_kv(cache: Any) -> list[tuple[torch.Tensor, torch.Tensor]]:
    return [(layer.keys, layer.values) for layer in cache.layers]


def crop(kv: list[tuple[torch.Tensor, torch.Tensor]], n: int) -> list[tuple[torch.Tensor, torch.Tensor]]:
    return [(k[:, :, :n], v[:, :, :n]) for k, v in kv]


def buffered_cache(
    kvs: list[list[tuple[torch.Tensor, torch.Tensor]]], lens: list[int], capacity: int
) -> Any:
    return buffered_cache_class()(kvs, lens, capacity)


_BUFFERED_CACHE: Any = None


def buffered_cache_class() -> Any:
    """Built on first use so that importing this module does not import transformers."""
    global _BUFFERED_CACHE
    if _BUFFERED_CACHE is not None:
        return _BUFFERED_CACHE
    import torch
    from transformers.cache_utils import Cache, DynamicLayer

    class BufferedLayer(DynamicLayer):
        """A DynamicLayer whose keys/values live in a preallocated buffer: one decode step writes
        one column instead of concatenating (copying) the whole cache."""

        def __init__(self, keys: torch.Tensor, values: torch.Tensor, width: int) -> None:
            super().__init__()
            self.buf_k, self.buf_v, self.width = keys, values, width
            self.device = keys.device
            self.is_initialized = True
            self._views()

        def _views(self) -> None:
            self.keys = self.buf_k[:, :, : self.width]
            self.values = self.buf_v[:, :, : self.width]

        def update(
            self, key_states: torch.Tensor, value_states: torch.Tensor, *args: Any, **kwargs: Any
        ) -> tuple[torch.Tensor, torch.Tensor]:
            n = key_states.shape[-2]
            if self.width + n > self.buf_k.shape[2]:
                raise RuntimeError("decode buffer overflow")
            self.buf_k[:, :, self.width : self.width + n] = key_states
            self.buf_v[:, :, self.width : self.width + n] = value_states
            self.width += n
            self._views()
            return self.kv()

        def get_seq_length(self) -> int:
            return self.width

        def select(self, rows: torch.Tensor, left: int) -> None:
            self.buf_k = self.buf_k[rows, :, left:].contiguous()
            self.buf_v = self.buf_v[rows, :, left:].contiguous()
            self.width -= left
            self._views()

        def kv(self) -> tuple[torch.Tensor, torch.Tensor]:
            return self.buf_k[:, :, : self.width], self.buf_v[:, :, : self.width]

    class BufferedCache(Cache):
        def __init__(
            self, kvs: list[list[tuple[torch.Tensor, torch.Tensor]]], lens: list[int], capacity: int
        ) -> None:
            width = max(lens)
            layers = []
            for layer in range(len(kvs[0])):
                k0, v0 = kvs[0][layer]
                shape = (len(kvs), k0.shape[1], capacity, k0.shape[3])
                buf_k = torch.zeros(shape, dtype=k0.dtype)
                buf_v = torch.zeros((*shape[:3], v0.shape[3]), dtype=v0.dtype)
                for row, (kv, n) in enumerate(zip(kvs, lens, strict=True)):
                    k, v = kv[layer]
                    buf_k[row, :, width - n : width] = k[0, :, :n]
                    buf_v[row, :, width - n : width] = v[0, :, :n]
                layers.append(BufferedLayer(buf_k, buf_v, width))
            super().__init__(layers=list(layers))
            self.buffered = layers

        def select(self, rows: torch.Tensor, left: int) -> None:
            for layer in self.buffered:
                layer.select(rows, left)

    _BUFFERED_CACHE = BufferedCache
    return BufferedCache
