"""The one registry of everything looked up by name: datasets, graders, metrics, backends, judges, stages.

Registration is one decorator (or call) next to the object, and it records everything a caller needs
to use the entry without a second list: its factory, the pydantic model of its options (so a spec can
be validated against it), a one-line description (the docstring's first line unless given), aliases,
and kind-specific metadata (`MetricInfo` for a metric, `BackendInfo` for a backend, ...).

Built-in entries are found by SCANNING the packages in `BUILTIN_PACKAGES` (every public module is
imported once, on the first lookup), not by an import hub; more modules come from the environment
variable `LEGIVAL_PLUGINS` (comma-separated module names) and the `legival.plugins` entry-point group.
A new metric, dataset, backend or judge is therefore one module dropped into its package (or one
plugin module) and nothing else. Modules must import cheaply: heavy dependencies (torch, vllm, ray,
prefect) load inside the factories that need them, so scanning never pulls them in.

This module imports nothing from the rest of `legival_core` (it is the bottom layer); scanning uses
`importlib`, so the registering modules import the registry and never the other way round.
"""

from __future__ import annotations

import importlib
import os
import pkgutil
import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any, Literal, TypeVar, get_args

Kind = Literal["dataset", "grader", "metric", "quality", "backend", "judge", "stage", "format", "cue"]
KINDS: tuple[str, ...] = get_args(Kind)

BUILTIN_PACKAGES: tuple[str, ...] = (
    "legival_core.datasets",
    "legival_core.readers.sources",
    "legival_core.metrics",
    "legival_core.quality.groups",
    "legival_core.backends",
    "legival_core.judges",
    "legival_core.stages",
    "legival_core.reports.stage",
    "legival_core.monitor.cues",
)
"""Packages whose public modules (names not starting with `_`) are imported to find built-ins (a
module in the list is imported itself)."""

PLUGINS_ENV = "LEGIVAL_PLUGINS"
ENTRY_POINT_GROUP = "legival.plugins"

T = TypeVar("T")


@dataclass(frozen=True, slots=True)
class Entry:
    """One registered thing. `obj` is what `get` returns (a factory, a spec, a function);
    `config` the pydantic model of its options (None: it takes none)."""

    kind: str
    name: str
    obj: Any
    description: str
    config: type | None = None
    aliases: tuple[str, ...] = ()
    meta: Any = None
    module: str = ""


class PluginError(ImportError):
    """A plugin module named by LEGIVAL_PLUGINS or an entry point could not be imported."""


class UnknownName(KeyError):
    """A name that is not registered; the message lists what is."""

    def __str__(self) -> str:  # KeyError quotes its argument; we want a readable sentence
        return str(self.args[0])


@dataclass
class _Registry:
    entries: dict[str, dict[str, Entry]] = field(default_factory=lambda: {k: {} for k in KINDS})
    aliases: dict[str, dict[str, str]] = field(default_factory=lambda: {k: {} for k in KINDS})
    scanned: bool = False
    lock: threading.RLock = field(default_factory=threading.RLock)


_REG = _Registry()


def _first_line(obj: Any) -> str:
    doc = getattr(obj, "__doc__", None) or ""
    return doc.strip().splitlines()[0].strip() if doc.strip() else ""


def add(entry: Entry) -> Entry:
    """Record an entry; registering another object under a taken name is an error (two modules
    claiming one name would otherwise depend on import order)."""
    if entry.kind not in KINDS:
        raise ValueError(f"unknown registry kind {entry.kind!r}; expected one of {', '.join(KINDS)}")
    with _REG.lock:
        existing = _REG.entries[entry.kind].get(entry.name)
        if existing is not None and existing.obj is not entry.obj and existing.module != entry.module:
            raise ValueError(f"{entry.kind} {entry.name!r} is already registered by {existing.module}")
        _REG.entries[entry.kind][entry.name] = entry
        for a in entry.aliases:
            _REG.aliases[entry.kind][a.lower()] = entry.name
    return entry


def register(
    kind: Kind,
    name: str,
    obj: Any = None,
    *,
    description: str | None = None,
    config: type | None = None,
    aliases: tuple[str, ...] = (),
    meta: Any = None,
) -> Any:
    """Register `obj` under (kind, name); without `obj`, a decorator. Returns the object."""

    def deco(o: T) -> T:
        add(Entry(kind, name, o, description if description is not None else _first_line(o), config,
                  tuple(aliases), meta, getattr(o, "__module__", "") or ""))
        return o

    return deco if obj is None else deco(obj)


def registered(kind: Kind, name: str, **kw: Any) -> Callable[[T], T]:
    """Decorator form of `register` (kept for readability at the definition site)."""
    deco: Callable[[T], T] = register(kind, name, **kw)
    return deco


def canonical_name(kind: Kind, name: str) -> str:
    discover()
    key = name.strip().lower()
    table = _REG.entries[kind]
    for n in table:
        if n.lower() == key:
            return n
    if key in _REG.aliases[kind]:
        return _REG.aliases[kind][key]
    known = ", ".join(sorted(table)) or "none"
    raise UnknownName(f"unknown {kind} {name!r}; known: {known}")


def entry(kind: Kind, name: str) -> Entry:
    return _REG.entries[kind][canonical_name(kind, name)]


def get(kind: Kind, name: str) -> Any:
    return entry(kind, name).obj


def entries(kind: Kind) -> list[Entry]:
    """Every entry of a kind, sorted by name."""
    discover()
    return [_REG.entries[kind][n] for n in sorted(_REG.entries[kind])]


def names(kind: Kind) -> list[str]:
    return [e.name for e in entries(kind)]


def is_registered(kind: Kind, name: str) -> bool:
    try:
        canonical_name(kind, name)
    except UnknownName:
        return False
    return True


# ------------------------------------------------------------------------------------------ scanning


def _public_modules(package: str) -> Iterator[str]:
    pkg = importlib.import_module(package)
    if not hasattr(pkg, "__path__"):  # a module, not a package: importing it was the point
        return
    for info in pkgutil.iter_modules(pkg.__path__):
        if not info.name.startswith("_"):
            yield f"{package}.{info.name}"


def plugin_modules() -> list[str]:
    """Modules named by `LEGIVAL_PLUGINS` and by the `legival.plugins` entry points."""
    out = [m.strip() for m in os.environ.get(PLUGINS_ENV, "").split(",") if m.strip()]
    try:
        from importlib.metadata import entry_points

        out += [ep.value.split(":")[0] for ep in entry_points(group=ENTRY_POINT_GROUP)]
    except Exception:  # noqa: BLE001 - broken third-party metadata must not break the registry
        pass
    return out


def discover() -> None:
    """Import every built-in module and plugin once (idempotent, thread-safe)."""
    if _REG.scanned:
        return
    with _REG.lock:
        if _REG.scanned:
            return
        _REG.scanned = True
        try:
            for package in BUILTIN_PACKAGES:
                for module in _public_modules(package):
                    importlib.import_module(module)
            for module in plugin_modules():
                try:
                    importlib.import_module(module)
                except Exception as e:  # any error of the plugin's own code is the plugin's: exit 2, not a crash
                    why = str(e) if isinstance(e, ImportError) else f"{type(e).__name__}: {e}"
                    raise PluginError(f"plugin module {module!r} (named by {PLUGINS_ENV} or the "
                                      f"{ENTRY_POINT_GROUP} entry points) cannot be imported: {why}") from e
        except BaseException:
            _REG.scanned = False
            raise


def load_plugin(module: str) -> None:
    """Import one more registering module now (e.g. a plugin named after discovery ran)."""
    discover()
    importlib.import_module(module)
