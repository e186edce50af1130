"""One registry for everything that is looked up by name: datasets, graders, metrics, backends, judges.

Registration is one decorator (or one call) next to the object; there is no second mapping to keep in
sync. Entries that need heavy optional dependencies register a small factory that imports them only
when called, so `import legival_core` never pulls in torch, vllm, ray or prefect.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Literal, TypeVar, get_args

Kind = Literal["dataset", "grader", "metric", "backend", "judge"]
KINDS: tuple[str, ...] = get_args(Kind)

T = TypeVar("T")

_entries: dict[str, dict[str, Any]] = {k: {} for k in KINDS}
_aliases: dict[str, dict[str, str]] = {k: {} for k in KINDS}


class UnknownName(KeyError):
    """A name that is not registered; the message lists what is."""

    def __str__(self) -> str:  # KeyError quotes its argument; we want a readable sentence
        return str(self.args[0])


def register(kind: Kind, name: str, obj: T, aliases: tuple[str, ...] = ()) -> T:
    if kind not in _entries:
        raise ValueError(f"unknown registry kind {kind!r}; expected one of {KINDS}")
    existing = _entries[kind].get(name)
    if existing is not None and existing is not obj:
        raise ValueError(f"{kind} {name!r} is already registered")
    _entries[kind][name] = obj
    for a in aliases:
        _aliases[kind][a] = name
    return obj


def registered(kind: Kind, name: str, aliases: tuple[str, ...] = ()) -> Callable[[T], T]:
    """Decorator form of `register`."""

    def deco(obj: T) -> T:
        return register(kind, name, obj, aliases)

    return deco


def canonical_name(kind: Kind, name: str) -> str:
    _ensure_builtin()
    key = name.strip().lower()
    if key in _entries[kind]:
        return key
    if key in _aliases[kind]:
        return _aliases[kind][key]
    known = ", ".join(sorted(list(_entries[kind]) + list(_aliases[kind])))
    raise UnknownName(f"unknown {kind} {name!r}; known: {known}")


def get(kind: Kind, name: str) -> Any:
    return _entries[kind][canonical_name(kind, name)]


def names(kind: Kind) -> list[str]:
    _ensure_builtin()
    return sorted(_entries[kind])


_loaded = False


def _ensure_builtin() -> None:
    """Import the modules that register the built-in entries (once, lazily, to avoid import cycles)."""
    global _loaded
    if _loaded:
        return
    _loaded = True
    import legival_core.backends.embedded  # noqa: F401
    import legival_core.backends.openai_backend  # noqa: F401
    import legival_core.backends.vllm_backend  # noqa: F401
    import legival_core.datasets  # noqa: F401
    import legival_core.judges  # noqa: F401
    import legival_core.metrics  # noqa: F401
    import legival_core.transfer  # noqa: F401
