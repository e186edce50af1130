"""`legival serve`: the dashboard live on 127.0.0.1, with every trace browsable."""

from __future__ import annotations

import signal
from typing import Annotated

import typer

from legival.app import DbOption, app, open_store, settings
from legival.console import emit_summary, err_console, fail
from legival.lifecycle.servers import Refusals, is_loopback, stop_signals, until_stopped
from legival_core.run_config import Efficiency, Report, Transfer, default_of


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
    refusals = Refusals()
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
                if not is_loopback(host):
                    err_console.print(f"warning: listening on {host}: anyone who can reach this address reads "
                                      "every stored trace", markup=False, highlight=False, soft_wrap=True)
                with stop_signals() as got_signal:  # before the URL: a signal right after it stops the server
                    err_console.print(f"Legi-Val dashboard on {server.url}  (Ctrl-C to stop)", markup=False,
                                      highlight=False)
                    print(server.url, flush=True)
                    got = until_stopped(server, got_signal)
        except ServerFailed as e:
            fail(f"the dashboard server stopped: {e}")
    summary: dict[str, object] = {"command": "serve", "url": server.url, "refused_requests": refusals.count}
    if got is not None:
        summary["stopped_by"] = signal.Signals(got).name
    emit_summary(summary)


