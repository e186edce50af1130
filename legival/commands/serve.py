"""`legival serve`: the dashboard live on 127.0.0.1, with every trace browsable."""

from __future__ import annotations

from typing import Annotated

import typer

from legival.app import DbOption, app, open_store, settings
from legival.console import emit_summary, err_console, fail
from legival_core.spec import Efficiency, Report, Transfer, default_of


@app.command()
def serve(
    db: DbOption,
    port: Annotated[int, typer.Option(help="Port on 127.0.0.1 (0 = any free port).")] = 8765,
    tau: Annotated[float, typer.Option(help="Redundancy threshold (SPEC: 0.8).")] = default_of(Efficiency, "tau"),
    model: Annotated[str, typer.Option(help="Embedding model of the redundancy rows.")] = default_of(Efficiency, "model"),
    n_bins: Annotated[int, typer.Option(help="Bins B the rollouts were planned with.")] = default_of(Transfer, "n_bins"),
    resamples: Annotated[int, typer.Option(help="Bootstrap resamples over problems.")] = default_of(Report, "resamples"),
    seed: Annotated[int, typer.Option(help="Bootstrap seed.")] = default_of(Report, "seed"),
) -> None:
    """Serve the report dashboard from the store (read-only) until interrupted: the page is built once,
    each connection is served on its own thread and a silent connection is dropped after a timeout."""
    from legival_core.reports.compute.data import ReportConfig
    from legival_core.reports.render.serve import PortInUse, make_server

    rep = settings(Report, resamples=resamples, seed=seed)
    config = ReportConfig(settings(Efficiency, tau=tau, model=model), settings(Transfer, n_bins=n_bins).n_bins,
                          rep.resamples, rep.seed)

    store = open_store(db, read_only=True)
    with store:
        try:
            server = make_server(store, port=port, config=config)
        except PortInUse:
            fail(f"port {port} is in use (choose another with --port)")
        host, bound = "127.0.0.1", int(server.server_address[1])
        err_console.print(f"Legi-Val dashboard on http://{host}:{bound}/  (Ctrl-C to stop)")
        print(f"http://{host}:{bound}/", flush=True)
        try:
            server.serve_forever()
        except KeyboardInterrupt:
            pass
        finally:
            server.server_close()
    emit_summary({"command": "serve", "url": f"http://{host}:{bound}/"})
