"""`legival add-teacher NAME --traces FILE | --model ID`: a new teacher in the spec, and its deployment."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path
from typing import Annotated

import typer

from legival.app import app
from legival.console import emit_summary, err_console, fail, out_console
from legival.paths import Role


@app.command("add-teacher")
def add_teacher(
    name: Annotated[str, typer.Argument(help="Teacher name (as stored and reported).")],
    traces: Annotated[list[Path] | None, typer.Option("--traces", help="Trace file(s) to ingest (repeatable)."), Role.INPUT] = None,
    model: Annotated[str | None, typer.Option("--model", help="Model id to generate traces with.")] = None,
    backend: Annotated[str, typer.Option(help="With --model: a registered backend (`legival list backends`).")] = "vllm",
    select: Annotated[str | None, typer.Option(help="With --traces: keep only records whose `model` field is this.")] = None,
    source: Annotated[str, typer.Option(
        "--from", help="With --traces: what the files are (auto, or a format of `legival list formats`).")] = "auto",
    dataset: Annotated[str | None, typer.Option(help="With --traces: the dataset, when the source does not name it.")
                       ] = None,
    mapping: Annotated[str | None, typer.Option(
        "--map", help="With --traces: columns as trace fields (reasoning=response,problem=question).")] = None,
    requests: Annotated[Path | None, typer.Option(help="With --traces: an OpenAI batch input file."), Role.INPUT] = None,
    problems: Annotated[Path | None, typer.Option(help="With --traces: the dataset's problems file (gold answers)."), Role.INPUT] = None,
    spec: Annotated[Path, typer.Option("--spec", help="Benchmark spec to edit."), Role.EDITED] = Path("examples/demo.yaml"),
    prefect_file: Annotated[Path, typer.Option("--prefect-file", help="prefect.yaml to regenerate."), Role.EDITED] = Path("prefect.yaml"),
    deploy: Annotated[bool, typer.Option("--deploy", help="Also run `prefect deploy` for the new deployment.")] = False,
) -> None:
    """Add a teacher to the spec (comments kept) and register its deployment in prefect.yaml."""
    from deployments.build import deployment_name, write_prefect_yaml
    from legival_core.run_config import SpecError, load_spec, parse_spec

    if bool(traces) == (model is not None):
        fail("give exactly one of --traces FILE or --model ID")
    from legival_core.registry import UnknownName, canonical_name

    try:
        backend = canonical_name("backend", backend)
    except UnknownName as e:
        fail(f"--backend: {e}")
    try:
        current = load_spec(spec)
    except SpecError as e:
        fail(str(e))
    if any(t.name == name for t in current.teachers):
        fail(f"teacher {name!r} is already in {spec}")
    base = spec.resolve().parent
    if traces:
        missing = [str(p) for p in traces if not p.is_file()]
        if missing:
            fail(f"trace file(s) not found: {', '.join(missing)}")
        refs = [_relative(p.resolve(), base) for p in traces]
        body = [f"traces: [{', '.join(_q(r) for r in refs)}]"] + ([f"select: {_q(select)}"] if select else [])
        body += _source_lines(source, dataset, mapping, requests, problems, base)
    else:
        if source != "auto" or dataset or mapping or requests or problems:
            fail("--from, --dataset, --map, --requests and --problems describe trace files: they need --traces")
        body = [f"generate: {{backend: {backend}, model: {_q(str(model))}}}"]
    text = spec.read_text(encoding="utf-8")
    new_text = insert_teacher(text, name, body)
    import yaml

    try:
        parse_spec(yaml.safe_load(new_text), base, str(spec))
    except SpecError as e:
        fail(f"the spec would not validate with this teacher:\n{e}")
    if deploy:  # before anything is written: `prefect deploy`'s client retries a silent API for minutes
        from tasks.infra import Unreachable, check_prefect

        try:
            check_prefect(current.execution.connect_timeout_s, str(spec))
        except Unreachable as e:
            fail(f"{e}; nothing was changed")
    spec.write_text(new_text, encoding="utf-8")
    written = write_prefect_yaml(spec, prefect_file, prefect_file.resolve().parent)
    dep = deployment_name(name)
    out_console.print(f"added teacher {name} to {spec}; deployment {dep} in {written}", markup=False, highlight=False)
    if model is not None:
        err_console.print("note: add `problems: FILE` (the dataset file) under this teacher's `generate:` "
                          "before `legival run` or `legival generate --spec`", markup=False, highlight=False)
    deployed = False
    if deploy:
        cmd = [sys.executable, "-m", "prefect", "--no-prompt", "deploy", "--prefect-file", str(written), "--name", dep]
        rc = subprocess.run(cmd, cwd=prefect_file.resolve().parent).returncode
        if rc != 0:
            fail(f"`{' '.join(cmd)}` failed with exit code {rc}")
        deployed = True
    emit_summary({"command": "add-teacher", "teacher": name, "spec": str(spec), "prefect_file": str(written),
                  "deployment": dep, "deployed": deployed})


def _source_lines(source: str, dataset: str | None, mapping: str | None, requests: Path | None,
                  problems: Path | None, base: Path) -> list[str]:
    """The teacher's trace-source keys (`format`, `dataset`, `map`, `requests`, `problems`) as spec lines."""
    from legival_core.readers.sources import parse_mapping

    try:
        pairs = parse_mapping(mapping)
    except ValueError as e:
        fail(str(e))
    lines = [f"format: {_q(source)}"] if source != "auto" else []
    lines += [f"dataset: {_q(dataset)}"] if dataset else []
    lines += [f"map: {{{', '.join(f'{_q(a)}: {_q(b)}' for a, b in pairs)}}}"] if pairs else []
    for key, path in (("requests", requests), ("problems", problems)):
        if path is not None:
            if not path.is_file():
                fail(f"--{key} {path}: file not found")
            lines.append(f"{key}: {_q(_relative(path.resolve(), base))}")
    return lines


def _q(s: str) -> str:
    import json

    return json.dumps(s)


def _relative(p: Path, base: Path) -> str:
    try:
        return str(p.relative_to(base))
    except ValueError:
        return str(p)


def insert_teacher(text: str, name: str, body: list[str]) -> str:
    """Append a teacher item at the end of the top-level `teachers:` block, keeping every comment.

    Falls back to re-dumping the YAML (comments lost) when the block is not a block sequence."""
    lines = text.splitlines(keepends=True)
    start = next((i for i, ln in enumerate(lines) if re.match(r"^teachers\s*:\s*(#.*)?$", ln)), None)
    if start is None:
        return _redump(text, name, body)
    end = start + 1
    item_indent: str | None = None
    last_content = start
    while end < len(lines):
        ln = lines[end]
        if ln.strip() and not ln.startswith((" ", "\t", "-", "#")):
            break
        m = re.match(r"^(\s*)- ", ln)
        if m and item_indent is None:
            item_indent = m.group(1)
        if ln.strip() and not ln.lstrip().startswith("#"):
            last_content = end
        end += 1
    if item_indent is None:
        return _redump(text, name, body)
    pad = item_indent + "  "
    block = [f"{item_indent}- name: {_q(name)}\n"] + [f"{pad}{b}\n" for b in body]
    if not lines[last_content].endswith("\n"):
        lines[last_content] += "\n"
    return "".join(lines[: last_content + 1] + block + lines[last_content + 1 :])


def _redump(text: str, name: str, body: list[str]) -> str:
    import yaml

    data = yaml.safe_load(text)
    item = {"name": name, **yaml.safe_load("\n".join(body))}
    data.setdefault("teachers", []).append(item)
    err_console.print("note: the spec was re-written without its comments", markup=False, highlight=False)
    return str(yaml.safe_dump(data, sort_keys=False))
