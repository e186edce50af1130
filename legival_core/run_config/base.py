"""What every spec model shares: strict keys with helpful messages, path resolution, name checks,
and validation of names against the registry (never against a hand-written list)."""

from __future__ import annotations

import re
from collections.abc import Callable
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, ValidationError, ValidationInfo, model_validator

from legival_core.registry import Kind, UnknownName, canonical_name

_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._/@:+-]*$")


class SpecError(ValueError):
    """A spec that does not validate; the message lists every problem with its location."""


class Strict(BaseModel):
    """Rejects unknown keys with the list of allowed ones (pydantic's own message omits it)."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    @model_validator(mode="before")
    @classmethod
    def _known_keys(cls, data: Any) -> Any:
        if isinstance(data, dict):
            allowed = set(cls.model_fields)
            unknown = sorted(shown(k, str) for k in data if k not in allowed)
            if unknown:
                raise ValueError(
                    f"unknown key(s) {', '.join(unknown)}; allowed: {', '.join(sorted(allowed))}"
                )
        return data


def default_of(model: type[BaseModel], field: str) -> Any:
    """The default of a spec field: what a CLI option falls back to, so the two cannot disagree."""
    return model.model_fields[field].get_default(call_default_factory=True)


def shown(value: Any, as_text: Callable[[Any], str] = repr) -> str:
    """`repr(value)` (or `as_text`) for a message; a value that has none (an int past Python's 4,300-digit
    limit, a list nested past the recursion limit) is named by its type."""
    try:
        return as_text(value)
    except (ValueError, RecursionError):
        return f"<{type(value).__name__}>"


def resolve_path(p: Path, info: ValidationInfo) -> Path:
    base = (info.context or {}).get("base_dir")
    try:
        p = Path(p).expanduser()
    except RuntimeError as e:  # `~user/...` for a user without a home directory
        raise ValueError(f"{p}: {e}") from None
    return p if p.is_absolute() or base is None else (Path(base) / p).resolve()


def check_files(info: ValidationInfo) -> bool:
    return bool((info.context or {}).get("check_files", True))


def optional_file(v: Path | None, info: ValidationInfo, what: str) -> Path | None:
    """A spec's optional file, resolved against the spec's folder; a missing one is an error naming
    `what` (unless the spec is read without checking files)."""
    if v is None:
        return None
    p = resolve_path(v, info)
    if check_files(info) and not p.is_file():
        raise ValueError(f"{what} not found: {p}")
    return p


def read_yaml(path: Path, what: str) -> Any:
    """A spec file's YAML data; SpecError naming the file for an unreadable file, text that is not
    UTF-8 or not YAML (a date or int PyYAML cannot build is a ValueError; deep nesting a RecursionError)."""
    import yaml

    try:
        text = path.read_text(encoding="utf-8")
    except OSError as e:
        raise SpecError(f"cannot read {what} {path}: {e.strerror}") from None
    except UnicodeDecodeError as e:
        raise SpecError(f"{path}: not UTF-8 text: {e}") from None
    try:
        return yaml.safe_load(text)
    except (yaml.YAMLError, ValueError, RecursionError) as e:
        raise SpecError(f"{path}: not valid YAML: {e}") from None


def check_name(v: str, what: str) -> str:
    if not _NAME.match(v):
        raise ValueError(f"{what} {v!r}: use letters, digits and . _ / @ : + - (no spaces)")
    return v


def registered_name(kind: Kind, name: str) -> str:
    """The canonical registered name, or a ValueError that lists the registered ones."""
    try:
        return canonical_name(kind, name)
    except UnknownName as e:
        raise ValueError(str(e)) from None


def format_errors(e: ValidationError, source: str) -> str:
    lines = [f"{source}: {e.error_count()} problem(s):"]
    for err in e.errors(include_url=False):
        loc = ".".join(str(x) for x in err["loc"]) or "<top>"
        msg = err["msg"].removeprefix("Value error, ")
        if err["type"] == "literal_error":
            msg = f"{msg} (got {shown(err.get('input'))})"
        lines.append(f"  {loc}: {msg}")
    return "\n".join(lines)
