"""`legival reward check|serve|report`: Legi-Val's metrics as a training reward (docs/reward.md)."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Annotated, Any

import typer

from legival.app import DbOption, app, open_store
from legival.console import emit_summary, err_console, fail, out_console
from legival.paths import Role

reward_app = typer.Typer(no_args_is_help=True, help="A legibility reward for training loops (docs/reward.md).")
app.add_typer(reward_app, name="reward")

SpecArg = Annotated[Path, typer.Argument(help="Reward spec (YAML); see examples/reward.yaml."), Role.INPUT]


def _load(spec: Path) -> Any:
    from legival_core.run_config import SpecError
    from legival_core.run_config.reward import load_reward_spec

    try:
        return load_reward_spec(spec)
    except SpecError as e:
        fail(str(e))


def _say(line: str) -> None:
    out_console.print(line, markup=False, highlight=False, soft_wrap=True)


@reward_app.command("check")
def check(spec: SpecArg) -> None:
    """Validate a reward spec and print what it scores: components and weights, students, the watch."""
    s = _load(spec)
    weighed = s.components.weighed()
    _say(f"reward {s.name} on {s.dataset}: " + " + ".join(f"{w.weight:g} x {n}" for n, w in weighed.items())
         + ("  (gated on correctness)" if s.combine.gate_on_correct else ""))
    t = s.components.transfer
    if t is not None:
        _say(f"transfer: student {t.student.name} ({t.student.backend}, {t.student.model}), depth interval "
             f"{t.step_interval}, {t.max_new_tokens} tokens per continuation, {t.incorrect:g} for an incorrect "
             "completion")
    _say(f"watch: {s.watch.student.name} ({s.watch.student.backend}, {s.watch.student.model}), never in the reward"
         if s.watch is not None else "watch: none (no Goodhart watch: docs/reward.md)")
    _say(f"log: {s.store} (journal beside it)" if s.store is not None else "log: none (no store: nothing logged)")
    emit_summary({"command": "reward check", "spec": str(spec), "name": s.name, "dataset": s.dataset,
                  "components": {n: w.weight for n, w in weighed.items()}, "spec_hash": s.spec_hash(),
                  "watch": s.watch.student.name if s.watch is not None else None,
                  "store": str(s.store) if s.store is not None else None})


@reward_app.command("serve")
def serve(
    spec: SpecArg,
    host: Annotated[str, typer.Option(help="Address to listen on (anything but loopback needs --token-file).")] = "127.0.0.1",
    port: Annotated[int, typer.Option(help="Port of the HTTP proxy.")] = 8790,
    replicas: Annotated[int, typer.Option("--replicas", min=1, help="Replicas (each owns its student engines; one per node).")] = 1,
    address: Annotated[str | None, typer.Option(
        "--address", help="Join this Ray cluster (default: a local Ray started and ended by this command).")] = None,
    token_file: Annotated[Path | None, typer.Option(
        "--token-file", help="A bearer token clients must send (a 0600 file; made when missing)."), Role.INPUT] = None,
    allow_host: Annotated[list[str] | None, typer.Option(
        "--allow-host", help="Another host name clients may use for this server (a proxy's); repeatable.")] = None,
    max_batch: Annotated[int, typer.Option("--max-batch", min=1, help="Items a replica scores together at most.")] = 64,
    cpus: Annotated[int | None, typer.Option("--cpus", min=1, help="CPUs of the local Ray (default: all).")] = None,
    replica_cpus: Annotated[float, typer.Option("--replica-cpus", min=0.1,
                                                help="CPUs each replica takes (its engines' threads).")] = 1.0,
) -> None:
    """Serve the reward over HTTP on Ray Serve until interrupted (Ctrl-C, SIGTERM or SIGHUP):
    `GET /health`, `POST /score` (native), `POST /get_reward` (OpenRLHF's remote reward)."""
    import signal

    from legival.lifecycle.servers import is_loopback, stop_signals
    from legival_core.web.guard import AllowedHosts, BadHostName

    t0 = time.perf_counter()
    s = _load(spec)
    try:
        AllowedHosts.for_server(host, allow_host or ())
    except BadHostName as e:
        fail(f"--allow-host/--host: {e}")
    if not is_loopback(host) and token_file is None:
        fail(f"--host {host}: a server beyond loopback needs --token-file FILE (clients send its token as "
             "Authorization: Bearer ...)")
    token = _token(token_file) if token_file is not None else None
    if s.store is not None:  # made (and its journal absorbed) once, then never held: the server logs to the journal
        open_store(s.store, create=True).close()
    from tasks.reward_serve import ServeOptions, start_serving

    opts = ServeOptions(str(spec.resolve()), host, port, replicas, token, tuple(allow_host or ()), max_batch,
                        replica_cpus=replica_cpus)
    err_console.print(f"reward {s.name}: starting {replicas} replica(s) on Ray Serve ...", markup=False,
                      highlight=False, soft_wrap=True)
    with stop_signals() as got:
        try:
            serving = start_serving(opts, address, str(s.store) if s.store is not None else None, cpus)
        except Exception as e:  # noqa: BLE001 - Ray or Serve could not start: one line, the cause
            fail(f"the reward server did not start: {type(e).__name__}: {str(e).splitlines()[0][:300] if str(e) else ''}")
        try:
            if not got:
                err_console.print(f"reward {s.name} on {serving.url}  (GET /health, POST /score, POST /get_reward; "
                                  "Ctrl-C to stop)", markup=False, highlight=False, soft_wrap=True)
                print(serving.url, flush=True)
            while not got:
                time.sleep(0.2)
        finally:
            serving.stop()
    emit_summary({"command": "reward serve", "spec": str(spec), "reward": s.name, "url": serving.url,
                  "replicas": replicas, "stopped_by": signal.Signals(got[0]).name if got else None,
                  "wall_s": round(time.perf_counter() - t0, 3)})


def _token(path: Path) -> str:
    """The bearer token in `path` (a new random one, written 0600, when the file is missing); a file
    others may read is refused. The token itself is never printed."""
    import os
    import secrets
    import stat

    if not path.exists():
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        with os.fdopen(fd, "w") as f:
            f.write(secrets.token_urlsafe(32) + "\n")
        err_console.print(f"note: wrote a new bearer token to {path} (mode 0600)", markup=False, highlight=False,
                          soft_wrap=True)
    mode = stat.S_IMODE(path.stat().st_mode)
    if mode & 0o077:
        fail(f"--token-file {path}: readable or writable by group or others (mode {mode:04o}); fix with "
             f"`chmod 600 {path}`")
    token = path.read_text(encoding="utf-8").strip()
    if len(token) < 16 or not token.isascii() or any(c.isspace() for c in token):
        fail(f"--token-file {path}: holds no usable token (at least 16 printable characters, no spaces)")
    return token


@reward_app.command("report")
def report(
    db: DbOption,
    out: Annotated[Path | None, typer.Option("--out", help="Write reward_watch.csv, .png and index.html here."),
                   Role.OUTPUT_DIR] = None,
    name: Annotated[str | None, typer.Option("--name", help="Only this reward (default: the only one logged).")] = None,
    buckets: Annotated[int, typer.Option("--buckets", min=1, help="Step buckets of the table.")] = 10,
    resamples: Annotated[int, typer.Option("--resamples", min=0, help="Bootstrap resamples of the bands.")] = 1000,
    fail_on: Annotated[str | None, typer.Option(
        "--fail-on", help="gap:DELTA -- exit 1 when the transfer-watch gap widened by more than DELTA.")] = None,
) -> None:
    """Reward, correctness, transfer and the watch student over training steps, with bootstrap bands;
    flags a widening transfer-watch gap (the Goodhart watch, docs/reward.md)."""
    from legival_core.rl.watch import gap_change, watch_table
    from legival_core.store.reward_log import reward_names, reward_rows

    threshold = _fail_on(fail_on)
    with open_store(db, read_only=True) as store:
        names = reward_names(store)
        if name is None and len(names) > 1:
            fail(f"--name: {db} logs several rewards ({', '.join(names)}): name one")
        if name is not None and name not in names:
            fail(f"--name: no reward {name!r} logged in {db} (logged: {', '.join(names) or 'none'})")
        rows = reward_rows(store, name or (names[0] if names else None))
    if rows.height == 0:
        fail(f"{db}: no scored item logged yet (a reward spec with `store: {db}` logs every item it scores: "
             "`legival reward serve SPEC` or the TRL/verl adapters)")
    table = watch_table(rows, buckets, resamples)
    gap = gap_change(rows, buckets, resamples)
    _print_table(table)
    verdict = ("WIDENING" if gap.widening else "steady") if gap.change is not None else "not enough buckets"
    _say(f"transfer-watch gap: first {_f(gap.first)}, last {_f(gap.last)}, change {_f(gap.change)} "
         f"[{_f(gap.low)}, {_f(gap.high)}]: {verdict}")
    files: list[str] = []
    if out is not None:
        files = _write(out, table)
    failed = threshold is not None and gap.change is not None and gap.change > threshold
    emit_summary({"command": "reward report", "db": str(db), "reward": name or names[0], "items": rows.height,
                  "buckets": table.height, "gap_first": gap.first, "gap_last": gap.last, "gap_change": gap.change,
                  "gap_low": gap.low, "gap_high": gap.high, "widening": gap.widening, "fail_on": fail_on,
                  "failed": failed, "files": files})
    if failed:
        raise typer.Exit(1)


def _fail_on(text: str | None) -> float | None:
    if text is None:
        return None
    what, _, delta = text.partition(":")
    try:
        value = float(delta)
    except ValueError:
        value = -1.0
    if what != "gap" or not value >= 0:
        fail(f"--fail-on {text!r}: expected gap:DELTA with DELTA >= 0 (e.g. gap:0.1)")
    return value


def _f(v: float | None) -> str:
    return "-" if v is None else f"{v:.3f}"


def _print_table(table: Any) -> None:
    _say("steps        n    reward  correct  transfer  watch   gap")
    for r in table.iter_rows(named=True):
        _say(f"{r['step_from']:>5}-{r['step_to']:<5} {r['n']:>4}  {_f(r['reward']):>7} {_f(r['correct']):>8} "
             f"{_f(r['transfer']):>9} {_f(r['watch']):>6} {_f(r['gap']):>6}")


def _write(out: Path, table: Any) -> list[str]:
    from legival_core.outputs import replaced_whole, write_manifest
    from legival_core.rl.report import write_watch_files

    try:
        with replaced_whole(out, "legival reward report") as new:
            files = write_watch_files(table, new)
            write_manifest(new, files, "legival reward report")
    except FileExistsError as e:
        fail(f"--out {out}: {e.strerror or e}")
    except OSError as e:
        fail(f"--out {out}: cannot write there ({e.strerror or e})")
    return files
