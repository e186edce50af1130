"""The last line of defence of every command (`legival.app.LegivalGroup`): what nothing else caught
becomes one `error:` line, with its traceback in a crash log (`legival_core.crashlog`), unless it is a
known condition (`legival_core.stages.conditions`: a bad input, an outside service's refusal), which
says what to fix in its own words, exit 2, no crash log."""

from __future__ import annotations

from collections.abc import Sequence

from legival_core.crashlog import crash_message


def known(e: BaseException) -> str | None:
    """The one line of a known condition in the chain of causes of `e` (None: a bug)."""
    from legival_core.stages.conditions import known_failure, reason

    cause = known_failure(e)
    return reason(cause) if cause is not None else None


def failure(e: BaseException, args: Sequence[str], what: str) -> tuple[str, int]:
    """The `error:` line and exit status of a flow (`what`: "benchmark", "generate") that raised: a
    known condition in its own words (exit 2), else `crash_message`."""
    line = known(e)
    if line is not None:
        return f"{what} failed: {line}", 2
    return crash_message(e, args, f"{what} failed")
