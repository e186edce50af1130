"""The guardian: `python -m legival_core.lifecycle.guardian OWNER_PID`, started by `legival_core.lifecycle.children`.

It reads lines on its standard input (`own PID START NAME`, `disown PID`) until end-of-file, which
comes when the owner is gone, however it went (a normal exit, an error, a cancel, SIGKILL): the kernel
closes the owner's end of the pipe. Then it ends every owned child still running, each with the
processes below it, and exits. It ignores the terminal's signals (a Ctrl-C reaches the whole process
group of a terminal's job; the guardian must outlive it to clean up). Standard library only: it starts
in milliseconds and imports nothing of the owner's.
"""

from __future__ import annotations

import signal
import sys


def main() -> int:
    for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP, signal.SIGQUIT):
        signal.signal(sig, signal.SIG_IGN)
    from legival_core.lifecycle.children import Child, end_trees

    owned: dict[int, Child] = {}
    for raw in sys.stdin.buffer:
        parts = raw.decode("utf-8", "replace").rstrip("\n").split(" ", 3)
        if parts[0] == "own" and len(parts) >= 3 and parts[1].isdigit():
            owned[int(parts[1])] = Child(int(parts[1]), parts[2], parts[3] if len(parts) > 3 else "")
        elif parts[0] == "disown" and len(parts) >= 2 and parts[1].isdigit():
            owned.pop(int(parts[1]), None)
    end_trees(owned.values())
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
