"""The keys of a Gemini batch file's lines (`gemini.GeminiJudge.batch_file_lines`): a JSONL line carries
no metadata, so its `key` names the trace and the window, and the result file's lines are matched back
through it."""

from __future__ import annotations


def file_key(meta: dict[str, str]) -> str:
    """A JSONL line's `key`: window, window count, step span, m, then the trace id (which may hold any
    character, so it comes last)."""
    window = f"w{meta['window']}/{meta['windows']}"
    return f"{window}:{meta['first']}-{meta['last']}:m{meta['m']}:{meta['trace_id']}"


def meta_from_key(key: object) -> dict[str, str]:
    """Inverse of `file_key`; {} for a key this module did not write."""
    if not isinstance(key, str):
        return {}
    try:
        win, span, m, tid = key.split(":", 3)
        window, windows = win.removeprefix("w").split("/")
        first, last = span.split("-")
        fields = (window, windows, first, last, m.removeprefix("m"))
        if not all(f.isdigit() for f in fields) or not win.startswith("w") or not m.startswith("m"):
            return {}
    except ValueError:
        return {}
    return {
        "key": f"{tid}#{window}",
        "trace_id": tid,
        "window": window,
        "windows": windows,
        "first": first,
        "last": last,
        "m": fields[4],
    }
