"""The local Ray of a run, started in a clean helper process that this one then connects to.

Why not `ray.init(address="local")` here: Ray starts its daemons (GCS, raylet, monitor, ...) with a
`preexec_fn`, so CPython forks THIS process and runs its after-fork hooks in the child before `exec`
(prefect, huggingface_hub, filelock, torch register some; 3.11 also clears the other threads' states
there). A run's driver has Prefect's event-loop, log and event threads and the cancel watcher; a lock
one of them held at the fork stays held in the child, which then never reaches `exec` and `ray.init`
waits forever (seen in CI: a hung monitor fork, the owner thread in `Popen._execute_child`). The
helper (`python -m tasks.local_ray`) has no thread of ours: it calls the same `ray.init` and prints the
cluster's address; this process starts it without a `preexec_fn` (no Python runs between fork and
exec) and joins as a driver.

The helper lives exactly as long as its standard input: closing it (`LocalHead.stop`) or this process
dying in any way (SIGKILL included: the kernel closes the pipe) makes it shut Ray down and exit; Ray's
daemons are fate-shared with the helper. It runs in its own session, so a Ctrl-C at the terminal
reaches this process only, which finishes its batches on the engines before it stops them.
"""

from __future__ import annotations

import contextlib
import json
import os
import selectors
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

from legival_core.lifecycle.cancel import raise_if_cancelled
from legival_core.lifecycle.children import disown, own

READY = "legival-local-ray "
"""The helper's one line on standard output once Ray is up: READY + {"address": GCS address}."""
START_TIMEOUT_S = 180.0
"""How long the helper may take to start Ray (a cold start on a busy 2-core machine takes ~10 s)."""
STOP_TIMEOUT_S = 60.0


class LocalRayFailed(RuntimeError):
    """The helper exited or stayed silent before Ray was up; the message carries its log's tail, and
    `log` is the kept log."""

    log: Path | None = None


@dataclass
class LocalHead:
    """A running helper and the address of the Ray it started."""

    process: subprocess.Popen[bytes]
    address: str
    log: Path

    def stop(self) -> None:
        """Close the helper's standard input (it shuts Ray down and exits); kill it if it does not
        within STOP_TIMEOUT_S. Its log is removed after a clean exit, kept (and named) otherwise."""
        stdin = self.process.stdin
        if stdin is not None and not stdin.closed:
            with contextlib.suppress(OSError):  # a helper already gone
                stdin.close()
        try:
            code = self.process.wait(STOP_TIMEOUT_S)
        except subprocess.TimeoutExpired:
            code = self.kill()
        disown(self.process.pid)
        self._close_pipes()
        if code == 0:
            self.log.unlink(missing_ok=True)  # the helper removes it too; not when it was killed

    def kill(self) -> int:
        """Kill the helper at once (Ray's daemons are fate-shared with it); its exit status."""
        self.process.kill()
        code = self.process.wait()
        disown(self.process.pid)
        self._close_pipes()
        return code

    def _close_pipes(self) -> None:
        for pipe in (self.process.stdin, self.process.stdout):
            if pipe is not None:
                with contextlib.suppress(OSError):
                    pipe.close()


def start_head(num_cpus: int | None, timeout_s: float = START_TIMEOUT_S) -> LocalHead:
    """Start the helper and wait for its address line; LocalRayFailed (with the helper's log) when it
    exits first or says nothing within `timeout_s`."""
    _same_auth_as_a_local_init()
    fd, name = tempfile.mkstemp(prefix="legival-local-ray-", suffix=".log")
    log = Path(name)
    with os.fdopen(fd, "wb") as err:
        process = subprocess.Popen(
            [sys.executable, "-m", "tasks.local_ray", "-" if num_cpus is None else str(num_cpus), str(log)],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=err, start_new_session=True,
            env={**os.environ, "PYTHONUNBUFFERED": "1"})
    head = LocalHead(process, "", log)
    own(process.pid, "the local Ray's helper")  # with its Ray daemons, below it (legival_core.lifecycle.children)
    try:
        head.address = _await_address(process, timeout_s)
    except LocalRayFailed as e:
        head.kill()
        failed = LocalRayFailed(f"{e}; its log ({log}) ends:\n{_tail(log)}")
        failed.log = log
        raise failed from None
    except BaseException:  # a cancel while Ray comes up
        head.kill()
        raise
    return head


def _same_auth_as_a_local_init() -> None:
    """Ray >= 2.5x turns token authentication on for a cluster that `ray.init` starts (RAY_AUTH_MODE
    unset: token, made once in ~/.ray/auth_token). The helper's `ray.init` does so in ITS process; a
    driver that joins by address must be in the same mode, so this process takes it first (with
    Ray's own function, which also refreshes Ray's cached config) and the helper inherits it. An
    explicit RAY_AUTH_MODE is kept by both; a Ray without token auth has nothing to do."""
    try:
        from ray._private.authentication.authentication_token_setup import enable_token_auth_by_default
    except ImportError:
        return
    enable_token_auth_by_default()


def _await_address(process: subprocess.Popen[bytes], timeout_s: float) -> str:
    assert process.stdout is not None
    deadline = time.monotonic() + timeout_s
    buffered = b""
    with selectors.DefaultSelector() as sel:
        sel.register(process.stdout, selectors.EVENT_READ)
        while True:
            left = deadline - time.monotonic()
            if left <= 0:
                raise LocalRayFailed(f"the local Ray did not start within {timeout_s:.0f} s")
            ready = sel.select(min(left, 0.25))
            raise_if_cancelled("the local Ray was up")  # a cancel while Ray starts: the helper is killed
            if not ready:
                continue
            chunk = os.read(process.stdout.fileno(), 65536)
            if not chunk:
                raise LocalRayFailed(f"the local Ray's helper exited (status {process.wait()}) before Ray was up")
            buffered += chunk
            for line in buffered.decode(errors="replace").splitlines():
                if line.startswith(READY):
                    return str(json.loads(line[len(READY):])["address"])


def _tail(log: Path, lines: int = 20) -> str:
    try:
        return "\n".join(log.read_text(errors="replace").splitlines()[-lines:])
    except OSError:
        return "(no log)"


def _serve(num_cpus: int | None, log: Path) -> None:
    """The helper: start Ray, say where it is, keep it up until standard input closes; then stop Ray
    and remove its own log (its driver may be gone: killed)."""
    import ray

    ray.init(address="local", num_cpus=num_cpus, include_dashboard=False, log_to_driver=False)
    address = ray.get_runtime_context().gcs_address
    sys.stdout.write(READY + json.dumps({"address": address}) + "\n")
    sys.stdout.flush()
    try:
        while sys.stdin.buffer.read(65536):
            pass
    finally:
        ray.shutdown()
    log.unlink(missing_ok=True)


if __name__ == "__main__":
    _serve(None if sys.argv[1] == "-" else int(sys.argv[1]), Path(sys.argv[2]))
