"""Run `legival` commands in tests: in-process through the typer app (the default), or as the real
console entry point in a subprocess (`entry_point`), both answering with the same `Ran` record.

In-process is what most tests want: the interpreter, the registry scan, the math-verify worker and
every loaded model are paid once per test session instead of once per command (issue 25). It goes
through the same click group as the console script (`legival.app.LegivalGroup`, the error boundary),
captures standard output and error at the file-descriptor level (so what child processes and C code
write is captured too, as a subprocess would see it) and turns an exception that escaped the app into
what the interpreter would print: a traceback on standard error and exit status 1. Tests that prove
the entry point itself (the console script, signals, a plugin found at start-up, a server process)
use `entry_point`.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import traceback
from collections.abc import Mapping
from dataclasses import dataclass
from functools import cache
from pathlib import Path
from typing import Any


@dataclass(frozen=True)
class Ran:
    """What one command did: the fields of `subprocess.CompletedProcess` that tests read."""

    args: tuple[str, ...]
    returncode: int
    stdout: str
    stderr: str

    def summary(self) -> dict[str, Any]:
        """The closing JSON line of standard output (every command ends with one)."""
        out: dict[str, Any] = json.loads(self.stdout.strip().splitlines()[-1])
        return out

    def error(self, *fragments: str, code: int = 2) -> str:
        """The command's one `error:` line (docs/CLI.md "Failure contract"), checked: exit `code`, no
        traceback on either stream, and every fragment in the line."""
        assert "Traceback" not in self.stderr + self.stdout, self.stderr
        assert self.returncode == code, (self.returncode, self.stdout[-2000:], self.stderr[-3000:])
        lines = [ln for ln in self.stderr.splitlines() if ln.startswith("error: ")]
        assert len(lines) == 1, self.stderr
        for f in fragments:
            assert f in lines[0], (f, lines[0])
        return lines[0]


@cache
def _command() -> Any:
    import typer.main

    from legival.cli import app

    return typer.main.get_command(app)


def _overrides(env: Mapping[str, str] | None) -> dict[str, str | None]:
    """A whole environment (as a subprocess takes it) as overrides of this process's: changed and
    new variables set, absent ones removed for the duration of the command."""
    if env is None:
        return {}
    changes: dict[str, str | None] = {k: v for k, v in env.items() if os.environ.get(k) != v}
    changes.update({k: None for k in os.environ if k not in env})
    return changes


def legival(*args: str | os.PathLike[str], env: Mapping[str, str] | None = None, cwd: Path | None = None,
            input: str | None = None, timeout: float | None = None) -> Ran:
    """`legival ARGS` in this process. `env`: the command's whole environment (default: this one's);
    `timeout` is accepted for symmetry with `entry_point` (pytest-timeout bounds a hang)."""
    from click.testing import CliRunner

    argv = tuple(str(a) for a in args)
    old_cwd = os.getcwd()
    if cwd is not None:
        os.chdir(cwd)
    try:
        result = CliRunner(capture="fd").invoke(_command(), list(argv), input=input, env=_overrides(env),
                                                catch_exceptions=True, prog_name="legival")
    finally:
        os.chdir(old_cwd)
    stderr = result.stderr
    code = result.exit_code
    if result.exception is not None and not isinstance(result.exception, SystemExit):
        assert result.exc_info is not None
        stderr += "".join(traceback.format_exception(*result.exc_info))
        code = 1
    return Ran(argv, code, result.stdout, stderr)


def entry_point(*args: str | os.PathLike[str], env: Mapping[str, str] | None = None, cwd: Path | None = None,
                input: str | None = None, timeout: float | None = 900) -> Ran:
    """`python -m legival ARGS` in a new process: the real console entry point."""
    argv = tuple(str(a) for a in args)
    p = subprocess.run([sys.executable, "-m", "legival", *argv], capture_output=True, text=True, env=env,
                       cwd=cwd, input=input, timeout=timeout)
    return Ran(argv, p.returncode, p.stdout, p.stderr)
