"""`legival generate`: teacher traces from a model, stored like ingested traces (issue 7)."""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Annotated, Any

import typer

from legival.app import app, open_store
from legival.console import emit_summary, err_console, fail, progress_bar
from legival.paths import Role
from legival.preflight import prepare_spec_run
from legival_core.run_config import Generation, default_of

_GEN_HELP = "Generation backend: a registered backend (`legival list backends`); openai is a chat endpoint."


@app.command()
def generate(
    db: Annotated[Path | None, typer.Option("--db", help="DuckDB store (with --spec: overrides the spec's `store`)."), Role.STORE] = None,
    spec_file: Annotated[Path | None, typer.Option(
        "--spec", help="Benchmark spec: generate for its teachers with `generate:` (the flow `generate`)."), Role.INPUT] = None,
    teacher: Annotated[str | None, typer.Option(
        help="Teacher name the traces are stored under (with --spec: only this spec teacher).")] = None,
    dataset: Annotated[str | None, typer.Option(help="A registered dataset (`legival list datasets`).")] = None,
    problems: Annotated[Path | None, typer.Option(help="Dataset file in its public format (e.g. GSM8K test.jsonl)."), Role.INPUT] = None,
    backend: Annotated[str, typer.Option(help=_GEN_HELP)] = "embedded",
    model: Annotated[str | None, typer.Option(help="Model id or local path (default: the embedded SmolLM2).")] = None,
    config: Annotated[str | None, typer.Option(
        help="Model config: a configs/models stem or a YAML path.")] = default_of(Generation, "config"),
    limit: Annotated[int | None, typer.Option(help="First N problems of the file.")] = default_of(Generation, "limit"),
    max_new_tokens: Annotated[int | None, typer.Option(
        help="Token budget (default: the model config's budget, as the spec's `generate.max_new_tokens`).",
    )] = default_of(Generation, "max_new_tokens"),
    fmt: Annotated[str | None, typer.Option(
        "--format", help="Loader format when the dataset has several.")] = default_of(Generation, "format"),
    batch_size: Annotated[int, typer.Option(
        help="Prompts per backend call (cache written after each).")] = default_of(Generation, "batch_size"),
    base_url: Annotated[str | None, typer.Option(
        help="OpenAI-compatible server (backend openai).")] = default_of(Generation, "base_url"),
    backend_options: Annotated[str, typer.Option(help="JSON object of extra backend options.")] = json.dumps(
        default_of(Generation, "backend_options")),
    greedy: Annotated[bool, typer.Option(
        "--greedy", help="Decode greedily instead of the model config's recommended sampling.")
    ] = default_of(Generation, "decoding") == "greedy",
    seed: Annotated[int, typer.Option(
        help="Base seed of the per-problem sampling seeds.", min=0)] = default_of(Generation, "seed"),
) -> None:
    """Generate teacher traces; a rerun generates nothing (cached by model, prompt, decoding, problem).

    Either `--spec SPEC.yaml [--teacher NAME]` (the spec's generating teachers, through the Prefect
    flow `generate`) or `--db --teacher --dataset --problems [--backend --model ...]` for one teacher."""
    if spec_file is not None:
        _from_spec(spec_file, db, teacher)
        return
    missing = [f"--{n}" for n, v in (("db", db), ("teacher", teacher), ("dataset", dataset), ("problems", problems))
               if v is None]
    if missing:
        fail(f"give --spec SPEC.yaml, or {', '.join(missing)} (with --backend/--model)")
    assert db is not None and teacher is not None and dataset is not None and problems is not None
    from legival_core import untrusted_json
    from legival_core.datasets.base import get_dataset
    from legival_core.generation.config import load_model_config
    from legival_core.registry import UnknownName
    from legival_core.stages.generate import run_generate

    try:
        spec = get_dataset(dataset)
        options: dict[str, Any] = untrusted_json.loads(backend_options)  # JsonRefused: a JSONDecodeError
        items = list(spec.load(problems, fmt))
    except UnknownName as e:
        fail(str(e))
    except json.JSONDecodeError as e:
        fail(f"--backend-options is not valid JSON: {e.msg}")
    except (OSError, ValueError) as e:
        fail(_load_error(problems, e))
    if not items:
        err_console.print(f"warning: {problems}: no problems (the file holds no record): nothing to generate",
                          markup=False, highlight=False, soft_wrap=True)
    if limit is not None:
        items = items[:limit]
    cfg = load_model_config(config, model)
    t0 = time.perf_counter()
    engine = _engine(backend, model, cfg, options, base_url)
    try:
        with open_store(db, create=True) as store, progress_bar(f"generate ({teacher})", total=len(items)) as bar:
            s = run_generate(store, engine, teacher, spec.name, items, cfg, max_new_tokens, batch_size,
                             progress=lambda done, total: bar.update(done=done, total=total), greedy=greedy,
                             seed=seed)
    finally:
        engine.close()
    emit_summary({"command": "generate", "config": cfg.name, **s.as_dict(),
                  "wall_s": round(time.perf_counter() - t0, 3)})


def _load_error(problems: Path, e: Exception) -> str:
    """The loader's message, which names the file (and line) itself when it is about the file's
    content (`FILE:LINE: ...`, `FILE: is a zip archive...`); otherwise said to be about loading it."""
    message = str(e)
    return message if message.startswith(f"{problems}:") else f"cannot load {problems}: {message}"


def _from_spec(spec_file: Path, db: Path | None, teacher: str | None) -> None:
    t0 = time.perf_counter()
    names = [teacher] if teacher else None
    _, db_path = prepare_spec_run(spec_file, db, names, only_generating=True)

    from legival.flow_command import run_flow

    # the run's path: the cancel, the processes it starts, the error boundary and the run's log
    results = run_flow("generate", lambda flow: flow(spec=str(spec_file.resolve()), db=str(db_path), teachers=names),
                       f"legival generate --spec {spec_file}", ["generate", "--spec", str(spec_file), "--db",
                                                                 str(db_path)], db=str(db_path))
    emit_summary({"command": "generate", "spec": str(spec_file), "db": str(db_path), "teachers": len(results),
                  "generated": sum(r["generated"] for r in results),
                  "new_traces": sum(r["new_traces"] for r in results),
                  "cached": sum(r["cached"] for r in results),
                  "runs": [d for r in results for d in r["datasets"]],
                  "wall_s": round(time.perf_counter() - t0, 3)})


def _engine(backend: str, model: str | None, cfg: Any, options: dict[str, Any], base_url: str | None) -> Any:
    from legival_core.generation.engines import chat_teacher, make_teacher_engine

    try:
        served = model or cfg.model if chat_teacher(backend) else model  # a chat endpoint serves a model id
        return make_teacher_engine(backend, served, cfg.chat_template_kwargs, cfg.tokenizer, options, base_url)
    except ValueError as e:
        fail(str(e))
