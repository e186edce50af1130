"""The last line of defence of every command (`legival.app.LegivalGroup`): what nothing else caught
becomes one `error:` line, with its traceback in a crash log (`legival_core.crashlog`)."""

from __future__ import annotations

from collections.abc import Sequence

from legival_core.crashlog import causes, crash_message


def input_error(e: BaseException) -> BaseException | None:
    """The error of the user's input (a spec, a trace file, a store, a plugin) in the chain of causes:
    those carry a message that says what to fix, and are exit 2 without a crash log."""
    from legival_core.grading.trace_records import IngestError
    from legival_core.registry import PluginError
    from legival_core.spec import SpecError
    from legival_core.store import StoreError

    return next((c for c in causes(e) if isinstance(c, PluginError | StoreError | SpecError | IngestError)), None)


def failure(e: BaseException, args: Sequence[str], what: str) -> tuple[str, int]:
    """The `error:` line and exit status of a flow (`what`: "benchmark", "generate") that raised: an
    input error in its own words (exit 2), else `crash_message`."""
    user = input_error(e)
    if user is not None:
        return f"{what} failed: {user}", 2
    return crash_message(e, args, f"{what} failed")
