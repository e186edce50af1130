"""`legival study create` and `legival study list`: human legibility studies (docs/study.md)."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Annotated, Any

import typer

from legival.app import DbOption, app, open_store, settings
from legival.console import emit_summary, err_console, fail, out_console
from legival.paths import Role
from legival_core.run_config import Transfer, default_of
from legival_core.study.serve_settings import StudyServeSettings
from legival_core.study.settings import StudySettings

study_app = typer.Typer(no_args_is_help=True, help="Human legibility studies: people as students (docs/study.md).")
app.add_typer(study_app, name="study")


def _fractions(text: str) -> tuple[float, ...]:
    out = []
    for part in text.split(","):
        try:
            out.append(float(part.strip()))
        except ValueError:
            fail(f"--depths: {part.strip()!r} is not a number (give fractions of the trace, e.g. 0.25,0.5,0.75,1.0)")
    return tuple(out)


def _consent(path: Path | None) -> str | None:
    if path is None:
        return None
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as e:
        fail(f"--consent {path}: cannot read it as UTF-8 text ({e})")
    if not text.strip():
        fail(f"--consent {path}: the file is empty: a participant must be shown a consent text")
    return text


@study_app.command("create")
def create(
    db: DbOption,
    name: Annotated[str, typer.Option("--name", help="The study's name (letters, digits, . _ -).")],
    problems: Annotated[int, typer.Option(
        "--problems", help="Problems per teacher; each of their traces is shown at every depth.")],
    teachers: Annotated[str | None, typer.Option(
        "--teachers", help="Comma-separated teachers (default: every teacher with transfer traces).")] = None,
    depths: Annotated[str, typer.Option(
        "--depths", help="Comma-separated prefix fractions in (0, 1]; each is the nearest SPEC grid depth.")] = ",".join(
        f"{f:g}" for f in default_of(StudySettings, "depths")),
    per_participant: Annotated[int, typer.Option(help="Items per participant (attention checks apart).")] = default_of(
        StudySettings, "per_participant"),
    participants: Annotated[int, typer.Option(help="Participants (codes P01, P02, ...).")] = default_of(
        StudySettings, "participants"),
    attention: Annotated[int, typer.Option(help="Attention-check items per participant (a prefix stating the answer).")] = (
        default_of(StudySettings, "attention")),
    seed: Annotated[int, typer.Option(help="The design's seed (the same seed, store and options: the same design).")] = (
        default_of(StudySettings, "seed")),
    minutes_per_item: Annotated[float, typer.Option(help="Minutes per item, for the estimate.")] = default_of(
        StudySettings, "minutes_per_item"),
    consent: Annotated[Path | None, typer.Option(help="A UTF-8 file with the consent text (default: the package's)."), Role.INPUT] = None,
    step_interval: Annotated[int, typer.Option(help="s of the depth grid (the spec's transfer.step_interval).")] = (
        default_of(Transfer, "step_interval")),
) -> None:
    """Design a study from the store's transfer traces and store it; print its plan and the links."""
    from legival_core.store.study import StudyExists
    from legival_core.study.create import create_study
    from legival_core.study.design import DesignError
    from legival_core.study.links import KeyFileError

    t0 = time.perf_counter()
    chosen = tuple(t.strip() for t in teachers.split(",") if t.strip()) if teachers is not None else ()
    if teachers is not None and not chosen:
        fail("--teachers: no teacher named (give comma-separated names, or leave the option out for all)")
    twice = sorted({t for t in chosen if chosen.count(t) > 1})
    if twice:
        fail(f"--teachers: {twice[0]!r} is named twice (name each teacher once)")
    s = settings(StudySettings, name=name, teachers=chosen, problems=problems, depths=_fractions(depths),
                 per_participant=per_participant, participants=participants, attention=attention, seed=seed,
                 minutes_per_item=minutes_per_item)
    text = _consent(consent)
    if step_interval < 1:
        fail("--step-interval: must be >= 1")
    with open_store(db) as store:
        try:
            made = create_study(store, s, step_interval, default_of(Transfer, "profile"), text)
        except (DesignError, StudyExists, KeyFileError) as e:
            fail(str(e))
    design = made.design
    _print_cells(design.cells())
    summary: dict[str, Any] = {"command": "study create", "db": str(db), "study": s.name, **design.summary(),
                               "teachers": list(design.config.teachers), "depths": list(design.config.depths),
                               "key_file": str(made.key_file), "wall_s": round(time.perf_counter() - t0, 3)}
    p = summary
    for line in (f"items: {p['items']} in {p['cells']} cells, and {p['attention_items']} attention checks",
                 f"answers needed: {p['answers_needed']} ({p['participants']} participants x "
                 f"{p['per_participant'] + p['attention']} items, {p['attention']} of them attention checks); "
                 f"answers per item: {p['answers_per_item']['min']} to {p['answers_per_item']['max']}",
                 f"estimated participant-minutes: {p['participant_minutes']:g} "
                 f"({design.config.minutes_per_item:g} min per item)",
                 f"key file: {made.key_file} (mode 0600; the links derive from it: keep it, never share it)",
                 "links (paths on the server; `legival study serve` prints full addresses):"):
        _say(line)
    from legival_core.study.links import ADMIN_CODE, admin_link, participant_link

    for code, tok in made.links:
        _say(f"  {code}  {admin_link(tok) if code == ADMIN_CODE else participant_link(tok)}")
    if p["answers_per_item"]["min"] == 0:
        err_console.print(f"warning: some items get no answer ({p['answers_needed']} answers over {p['items']} items): "
                          "raise --participants or lower --problems", markup=False, highlight=False, soft_wrap=True)
    emit_summary(summary)


def _say(line: str) -> None:
    out_console.print(line, markup=False, highlight=False, soft_wrap=True)


def _print_cells(rows: list[dict[str, Any]]) -> None:
    from rich import box
    from rich.table import Table

    table = Table(title="study design: teacher x depth", box=box.SIMPLE_HEAD, pad_edge=False)
    for h, j in (("teacher", "left"), ("fraction", "right"), ("mean k/m", "right"), ("items", "right"),
                 ("answers", "right")):
        table.add_column(h, justify=j)  # type: ignore[arg-type]
    for r in rows:
        table.add_row(r["teacher"], f"{r['fraction']:g}", f"{r['mean_k_over_m']}", str(r["items"]), str(r["answers"]))
    out_console.print(table)


@study_app.command("list")
def list_studies(db: DbOption) -> None:
    """The studies in the store, with their items, participants and answers so far."""
    from legival_core.store.study import studies

    with open_store(db, read_only=True) as store:
        frame = studies(store)
    rows = [{**r, "created": str(r["created"])[:19]} for r in frame.to_dicts()]
    if not rows:
        _say(f"no study in {db} (`legival study create --db {db} --name N --problems P` designs one)")
    for r in rows:
        _say(f"{r['name']}  created {r['created']}  seed {r['seed']}  items {r['items']} (+{r['attention_items']} "
             f"attention)  participants {r['participants']}  answers {r['answers']}/{r['answers_needed']}")
    emit_summary({"command": "study list", "db": str(db), "studies": rows})


@study_app.command("serve")
def serve(
    db: DbOption,
    name: Annotated[str, typer.Option("--name", help="The study to serve.")],
    host: Annotated[str, typer.Option(
        help="Address to listen on. Anything but a loopback address puts the study on the network, where the "
             "participants' tokens are the only protection (use a reverse proxy with TLS).")] = default_of(
        StudyServeSettings, "host"),
    port: Annotated[int, typer.Option(help="Port (0 = any free port).")] = default_of(StudyServeSettings, "port"),
    allow_host: Annotated[list[str] | None, typer.Option(
        "--allow-host", help="Another host name the browser may use for this server (a reverse proxy's); "
                             "repeatable. 127.0.0.1, localhost and [::1] are always allowed.")] = None,
) -> None:
    """Serve the study to its participants until interrupted (Ctrl-C, SIGTERM or SIGHUP): prints each
    participant's link and the admin's on standard output (the only place tokens appear)."""
    import signal

    from legival.lifecycle.servers import Refusals, is_loopback, stop_signals, until_stopped
    from legival_core.store.study import participants as people
    from legival_core.store.study import study_names
    from legival_core.study.links import (
        ADMIN_CODE,
        KeyFileError,
        admin_link,
        participant_link,
        study_key,
        token,
    )
    from legival_core.study.served import ServedStudy, StudyServed
    from legival_core.study.server import ServerStats, make_study_server
    from legival_core.web.guard import AllowedHosts, BadHostName
    from legival_core.web.server import PortInUse, ServerFailed

    settings(StudyServeSettings, host=host, port=port)
    try:
        AllowedHosts.for_server(host, allow_host or ())
    except BadHostName as e:
        fail(f"--allow-host/--host: {e}")
    refusals, stats = Refusals(), ServerStats()
    # the study is read once and the store closed again: the server commits to the store's journal, so
    # `legival report`, `serve`, `study grade` and runs use the store meanwhile (docs/study.md)
    with open_store(db, read_only=True) as store:
        known = study_names(store)
        if name not in known:
            fail(f"--name: no study {name!r} in {db} (studies: {', '.join(known) or 'none'}; "
                 "`legival study create` designs one)")
        try:
            key = study_key(store, name)
        except KeyFileError as e:
            fail(str(e))
        try:
            served = ServedStudy.load(store, name)
        except LookupError as e:
            fail(f"{db}: study {name}: {e}")
        codes = [p.code for p in people(store, name)]
    try:
        served.hold()
    except StudyServed as e:
        served.close()
        fail(str(e))
    try:
        try:
            server = make_study_server(served, key, host=host, port=port, allow_hosts=allow_host or (),
                                       on_refused=refusals, stats=stats)
        except PortInUse:
            fail(f"--port: port {port} is in use (choose another with --port)")
        except OSError as e:
            fail(f"--host {host} --port {port}: cannot listen there ({e.strerror or e})")
        try:
            with server:
                base, note = _link_base(server.url, host, allow_host or [])
                if not is_loopback(host):
                    err_console.print(
                        f"warning: listening on {host}: the participants' and the admin's tokens are the only "
                        "protection of the study, and plain HTTP carries them readable on the network: put a "
                        "reverse proxy with TLS in front (and name it with --allow-host)" + note,
                        markup=False, highlight=False, soft_wrap=True)
                elif note:
                    err_console.print(f"note:{note[1:]}", markup=False, highlight=False, soft_wrap=True)
                with stop_signals() as got_signal:
                    err_console.print(f"study {name} on {server.url}  ({len(codes) - 1} participants; links on "
                                      "standard output; Ctrl-C to stop)", markup=False, highlight=False, soft_wrap=True)
                    for code in codes:  # participants, then the admin (its line last)
                        tok = token(key, name, code)
                        link = admin_link(tok) if code == ADMIN_CODE else participant_link(tok)
                        print(f"{code}  {base}{link}", flush=True)
                    got = until_stopped(server, got_signal)
        except ServerFailed as e:
            fail(f"the study server stopped: {e}")
    finally:
        served.close()
    summary: dict[str, object] = {"command": "study serve", "db": str(db), "study": name, "url": server.url,
                                  "answers_stored": stats.answers,
                                  "refused_requests": refusals.count + stats.refused}
    if got is not None:
        summary["stopped_by"] = signal.Signals(got).name
    emit_summary(summary)


def _link_base(url: str, host: str, allow_host: list[str]) -> tuple[str, str]:
    """(the base of the printed links, a note for the warning). A link must name a host the guard
    accepts and a participant can reach: the first --allow-host name when given (a proxy's: its scheme
    and port may differ from this server's); with a wildcard address (0.0.0.0, ::) and none given,
    loopback, since the guard refuses any name not given with --allow-host."""
    from urllib.parse import urlsplit

    from legival_core.web.guard import host_name

    u = urlsplit(url)
    if allow_host:
        name = host_name(allow_host[0])
        return (f"{u.scheme}://{name}:{u.port}",
                f"; the links name {name} with this server's scheme and port ({u.scheme}, {u.port}): behind a "
                "reverse proxy, participants use the proxy's scheme and port (e.g. https://" + name + "/p/...)")
    if host_name(host) in ("0.0.0.0", "[::]"):
        loop = "[::1]" if host_name(host) == "[::]" else "127.0.0.1"
        return (f"{u.scheme}://{loop}:{u.port}",
                f"; {host} names no host: participants' requests are refused unless the name they use (this "
                "machine's name or address, or the proxy's) is given with --allow-host (the links below name "
                f"{loop}, this machine alone)")
    return url.rstrip("/"), ""
