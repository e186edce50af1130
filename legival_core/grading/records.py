"""Reading public dataset files with errors that say where the bad data is.

Loaders raise `ValueError` naming the file, the line and the field, so a corrupt row is fixed at its
source instead of surfacing later as a wrong grade. (It lives here because every dataset module
already depends on `legival_core.grading`, and `legival_core.datasets` imports its modules eagerly.)
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any


def read_jsonl(path: Path) -> Iterator[tuple[int, dict[str, Any]]]:
    """(0-based row index, record) for each non-blank line; the index counts records, not lines."""
    path = Path(path)
    index = 0
    with path.open(encoding="utf-8") as f:
        for lineno, line in enumerate(f, start=1):
            if not line.strip():
                continue
            try:
                rec = json.loads(line)
            except json.JSONDecodeError as e:
                raise ValueError(f"{path}:{lineno}: bad JSON ({e.msg})") from None
            if not isinstance(rec, dict):
                raise ValueError(f"{path}:{lineno}: expected a JSON object, got {type(rec).__name__}")
            yield index, rec | {"__line__": lineno}
            index += 1


def field(rec: dict[str, Any], name: str, path: Path, kind: type = str) -> Any:
    """rec[name], checked for presence and type."""
    line = rec.get("__line__", "?")
    if name not in rec or rec[name] is None:
        raise ValueError(f"{path}:{line}: missing field {name!r}")
    value = rec[name]
    if kind is str and isinstance(value, int | float) and not isinstance(value, bool):
        value = str(value)
    if not isinstance(value, kind):
        raise ValueError(
            f"{path}:{line}: field {name!r} should be {kind.__name__}, got {type(value).__name__}"
        )
    return value
