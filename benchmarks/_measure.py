"""What several benchmarks measure with: a process's peak memory, a phase run in a fresh process (so that
its peak memory is its own), the machine's load, and the fake Gemini server the judge benchmarks call."""

from __future__ import annotations

import json
import os
import resource
import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any


def peak_rss_mib(children: bool = False) -> float:
    """This process's peak resident set in MiB: the kernel's high-water mark of its memory (`VmHWM`),
    which starts afresh at exec (`ru_maxrss` does not: a process started from a big parent reports the
    parent's). `children`: the larger of that and its finished children's peak (`RUSAGE_CHILDREN`)."""
    own = None
    try:
        for line in Path("/proc/self/status").read_text().splitlines():
            if line.startswith("VmHWM:"):
                own = int(line.split()[1]) / 1024
                break
    except OSError:
        pass
    if own is None:  # no /proc: the kernel's peak as getrusage reports it
        own = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    if children:
        return max(own, resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / 1024)
    return own


def run_phase(script: str, args: list[str]) -> dict[str, Any]:
    """One phase of a benchmark `script` in a fresh process; its last stdout line is its JSON result."""
    proc = subprocess.run([sys.executable, script, *args], stdout=subprocess.PIPE, text=True, check=False)
    if proc.returncode != 0:
        sys.exit(f"phase {args[1]} failed (exit {proc.returncode})")
    return dict(json.loads(proc.stdout.strip().splitlines()[-1]))


def load_average() -> list[float]:
    """The machine's 1, 5 and 15-minute load averages, rounded: on a shared machine they say how far a
    benchmark's times can be trusted, so a benchmark reports them at its start and at its end."""
    return [round(x, 2) for x in os.getloadavg()]


def machine_at_start() -> list[float]:
    """Prints the machine's CPUs and load average; returns the load (for the result's `load_start`)."""
    load = load_average()
    print(f"machine: {os.cpu_count()} CPUs, load average {load[0]} {load[1]} {load[2]} at start", flush=True)
    return load


def _serve(delay: float, urls: Any, stop: Any) -> None:
    from tests.fakes.gemini_server import FakeGemini

    with FakeGemini(delay_s=delay) as srv:
        urls.put(srv.url)
        stop.wait()


@contextmanager
def fake_gemini(delay_s: float, *, same_process: bool = False) -> Iterator[str]:
    """The URL of `tests.fakes`' Gemini server answering after `delay_s`: in a process of its own (its
    work does not share the judge's interpreter), or in this one with `same_process`."""
    if same_process:
        from tests.fakes.gemini_server import FakeGemini

        with FakeGemini(delay_s=delay_s) as srv:
            yield srv.url
        return
    import multiprocessing as mp  # here, not at the top: a phase importing `peak_rss_mib` does not load it

    urls: Any = mp.Queue()
    stop = mp.Event()
    proc = mp.Process(target=_serve, args=(delay_s, urls, stop), daemon=True)
    proc.start()
    try:
        yield urls.get(timeout=30)
    finally:
        stop.set()
        proc.join(5)
