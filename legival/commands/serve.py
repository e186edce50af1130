"""`legival serve`: the dashboard live on 127.0.0.1, with every trace browsable."""

from __future__ import annotations

import signal
from collections.abc import Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING, Annotated

import typer

from legival.app import DbOption, app, open_store, settings
from legival.console import emit_summary, err_console, fail
from legival_core.spec import Efficiency, Report, Transfer, default_of

if TYPE_CHECKING:
    from legival_core.web.server import LocalServer

STOP_SIGNALS = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)
"""Each ends the server the same way: answers in flight finish, the closing line, exit 0."""

MAX_REFUSAL_WARNINGS = 5
"""Distinct refused values (Host, Origin) named on stderr; the rest are only counted."""


@app.command()
def serve(
    db: DbOption,
    port: Annotated[int, typer.Option(help="Port (0 = any free port).")] = 8765,
    host: Annotated[str, typer.Option(
        help="Address to listen on. Anything but a loopback address makes every stored trace readable by "
             "whoever reaches it.")] = "127.0.0.1",
    allow_host: Annotated[list[str] | None, typer.Option(
        "--allow-host", help="Another host name the browser may use for this server (a reverse proxy's, an "
                             "/etc/hosts alias); repeatable. 127.0.0.1, localhost and [::1] are always allowed.")
    ] = None,
    tau: Annotated[float, typer.Option(help="Redundancy threshold (SPEC: 0.8).")] = default_of(Efficiency, "tau"),
    model: Annotated[str, typer.Option(help="Embedding model of the redundancy rows.")] = default_of(Efficiency, "model"),
    n_bins: Annotated[int, typer.Option(help="Bins B the rollouts were planned with.")] = default_of(Transfer, "n_bins"),
    resamples: Annotated[int, typer.Option(help="Bootstrap resamples over problems.")] = default_of(Report, "resamples"),
    seed: Annotated[int, typer.Option(help="Bootstrap seed.")] = default_of(Report, "seed"),
) -> None:
    """Serve the report dashboard from the store (read-only) until interrupted (Ctrl-C, SIGTERM or
    SIGHUP). Only requests addressed to this server's own names are answered (docs/security.md)."""
    from legival_core.reports.compute.data import ReportConfig
    from legival_core.reports.render.serve import PortInUse, make_server
    from legival_core.web.guard import AllowedHosts, BadHostName
    from legival_core.web.server import ServerFailed

    try:
        AllowedHosts.for_server(host, allow_host or ())
    except BadHostName as e:
        fail(f"--allow-host/--host: {e}")
    rep = settings(Report, resamples=resamples, seed=seed)
    config = ReportConfig(settings(Efficiency, tau=tau, model=model), settings(Transfer, n_bins=n_bins).n_bins,
                          rep.resamples, rep.seed)
    refusals = _Refusals()
    with open_store(db, read_only=True) as store:
        try:
            server = make_server(store, port=port, config=config, host=host, allow_hosts=allow_host or (),
                                 on_refused=refusals)
        except PortInUse:
            fail(f"port {port} is in use (choose another with --port)")
        except OSError as e:
            fail(f"--host {host} --port {port}: cannot listen there ({e.strerror or e})")
        try:
            with server:  # stopped on every way out: answers in flight finish, the socket is closed
                if not _is_loopback(host):
                    err_console.print(f"warning: listening on {host}: anyone who can reach this address reads "
                                      "every stored trace", markup=False, highlight=False, soft_wrap=True)
                with _stop_signals() as got_signal:  # before the URL: a signal right after it stops the server
                    err_console.print(f"Legi-Val dashboard on {server.url}  (Ctrl-C to stop)", markup=False,
                                      highlight=False)
                    print(server.url, flush=True)
                    got = _until_stopped(server, got_signal)
        except ServerFailed as e:
            fail(f"the dashboard server stopped: {e}")
    summary: dict[str, object] = {"command": "serve", "url": server.url, "refused_requests": refusals.count}
    if got is not None:
        summary["stopped_by"] = signal.Signals(got).name
    emit_summary(summary)


@contextmanager
def _stop_signals() -> Iterator[list[int]]:
    """Within the block, SIGINT, SIGTERM and SIGHUP are recorded (the list yielded) instead of raised:
    the server stops as its normal end. Python runs the handlers on this (the main) thread."""
    got: list[int] = []
    old = {s: signal.signal(s, lambda signum, _frame: got.append(signum)) for s in STOP_SIGNALS}
    try:
        yield got
    finally:
        for s, h in old.items():
            signal.signal(s, h)


def _until_stopped(server: LocalServer, got: list[int]) -> int | None:
    """Block until a stop signal (its number) or the server ends on its own (None; ServerFailed when
    it ended with an error)."""
    while not got:
        if server.wait(0.5):
            return None
    return got[0]


def _is_loopback(host: str) -> bool:
    import ipaddress

    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return host.lower() == "localhost"


class _Refusals:
    """Counts refused requests and names the first few distinct values on stderr: a user behind a proxy
    learns which --allow-host to add; an attack is visible."""

    def __init__(self) -> None:
        self.count = 0
        self._named: set[tuple[str, str]] = set()

    def __call__(self, what: str, value: str) -> None:
        self.count += 1
        key = (what, value[:80])
        if key in self._named or len(self._named) >= MAX_REFUSAL_WARNINGS:
            return
        self._named.add(key)
        hint = " (add --allow-host NAME if it is yours)" if what == "host" else ""
        err_console.print(f"warning: refused a request with {what} {ascii(value[:80])}{hint}",
                          markup=False, highlight=False, soft_wrap=True)
