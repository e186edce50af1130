"""`legival generate`: teacher traces from a model, stored like ingested traces (issue 7)."""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Annotated, Any

import typer

from legival.app import DbOption, app, open_store
from legival.console import emit_summary, fail, progress_bar


@app.command()
def generate(
    db: DbOption,
    teacher: Annotated[str, typer.Option(help="Teacher name the traces are stored under.")],
    dataset: Annotated[str, typer.Option(help="Dataset name (gsm8k, math, gpqa, connections, lsat).")],
    problems: Annotated[Path, typer.Option(help="Dataset file in its public format (e.g. GSM8K test.jsonl).")],
    backend: Annotated[str, typer.Option(help="embedded | vllm | openai (chat endpoint).")] = "embedded",
    model: Annotated[str | None, typer.Option(help="Model id or local path (default: the embedded SmolLM2).")] = None,
    config: Annotated[str | None, typer.Option(help="Model config: a configs/models stem or a YAML path.")] = None,
    limit: Annotated[int | None, typer.Option(help="First N problems of the file.")] = None,
    max_new_tokens: Annotated[int | None, typer.Option(help="Token budget (default: the model config's).")] = None,
    fmt: Annotated[str | None, typer.Option("--format", help="Loader format when the dataset has several.")] = None,
    batch_size: Annotated[int, typer.Option(help="Prompts per backend call (cache written after each).")] = 8,
    base_url: Annotated[str | None, typer.Option(help="OpenAI-compatible server (backend openai).")] = None,
    backend_options: Annotated[str, typer.Option(help="JSON object of extra backend options.")] = "{}",
) -> None:
    """Generate teacher traces; a rerun generates nothing (cached by model, prompt, decoding, problem)."""
    from legival_core.datasets.base import get_dataset
    from legival_core.generation.config import load_model_config
    from legival_core.registry import UnknownName
    from legival_core.stages.generate import run_generate

    try:
        spec = get_dataset(dataset)
        options: dict[str, Any] = json.loads(backend_options)
        items = list(spec.load(problems, fmt))
    except UnknownName as e:
        fail(str(e))
    except json.JSONDecodeError as e:
        fail(f"--backend-options is not valid JSON: {e.msg}")
    except (OSError, ValueError) as e:
        fail(f"cannot load {problems}: {e}")
    if limit is not None:
        items = items[:limit]
    cfg = load_model_config(config, model)
    t0 = time.perf_counter()
    engine = _engine(backend, model, cfg, options, base_url)
    try:
        with open_store(db) as store, progress_bar(f"generate ({teacher})", total=len(items)) as bar:
            s = run_generate(store, engine, teacher, spec.name, items, cfg, max_new_tokens, batch_size,
                             progress=lambda done, total: bar.update(done=done, total=total))
    finally:
        engine.close()
    emit_summary({"command": "generate", "config": cfg.name, **s.as_dict(),
                  "wall_s": round(time.perf_counter() - t0, 3)})


def _engine(backend: str, model: str | None, cfg: Any, options: dict[str, Any], base_url: str | None) -> Any:
    import os

    from legival_core.backends.lazy import LazyBackend
    from legival_core.generation.engines import BackendEngine, ChatEndpointEngine
    from legival_core.registry import get

    if backend == "openai":
        url = base_url or os.environ.get("LEGIVAL_OPENAI_BASE_URL")
        if not url:
            fail("--backend openai needs --base-url (or LEGIVAL_OPENAI_BASE_URL)")
        return ChatEndpointEngine(str(url), model or cfg.model, chat_template_kwargs=cfg.chat_template_kwargs,
                                  **options)
    if backend not in ("embedded", "vllm"):
        fail(f"--backend must be embedded, vllm or openai, not {backend!r}")
    factory = get("backend", backend)
    if model is not None:
        options.setdefault("model_dir" if backend == "embedded" else "model", model)
        options.setdefault("model_id", model)
    return BackendEngine(LazyBackend(lambda: factory(**options)), cfg.chat_template_kwargs, cfg.tokenizer)
