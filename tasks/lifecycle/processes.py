"""The Prefect temporary server as a child this process owns (`legival_core.lifecycle.children`).

Without PREFECT_API_URL, Prefect starts its temporary API server as a subprocess of the process that
first needs it (`legival run`'s own) and stops it from an `atexit` handler. A forced exit (the cancel's
watchdog, a second Ctrl-C) skips `atexit`, and SIGKILL skips everything: the server then kept running,
holding the command's standard output and error open, so whoever read them to their end waited
forever. Owned, it is ended on every way out (`children.end_all`, the guardian)."""

from __future__ import annotations

import sys

from legival_core.lifecycle.children import own


def own_prefect_servers() -> list[int]:
    """Own every temporary server Prefect started in this process (none: nothing to do); their pids."""
    module = sys.modules.get("prefect.server.api.server")
    servers = getattr(getattr(module, "SubprocessASGIServer", None), "_instances", {}) if module else {}
    pids = []
    for server in list(servers.values()):
        proc = getattr(server, "server_process", None)
        if proc is not None and proc.poll() is None:
            own(proc.pid, "the Prefect temporary server")
            pids.append(proc.pid)
    return pids

