"""Teachers of a benchmark spec: trace files to ingest, or a model to generate traces with."""

from __future__ import annotations

from pathlib import Path
from typing import Any, Literal

from pydantic import Field, ValidationInfo, field_validator, model_validator

from legival_core.readers.sources import AUTO, OWN, SourceOptions, input_present, parse_mapping
from legival_core.registry import UnknownName
from legival_core.run_config.base import (
    SpecError,
    Strict,
    check_files,
    check_name,
    optional_file,
    registered_name,
    resolve_path,
)


class Generation(Strict):
    """Teacher trace generation (`legival generate --spec`, `legival run`) by `backend` with `model`,
    on the problems of `problems` (one dataset file, or {dataset: FILE}). `decoding: recommended`
    samples with the model config's temperature/top_p/top_k (seeded per problem from `seed`);
    `decoding: greedy` decodes greedily. `max_new_tokens` defaults to the model config's budget
    (configs/models), as `legival generate` does."""

    backend: str
    model: str = Field(min_length=1)
    config: str | None = Field(default=None, description="model config: a configs/models stem or a YAML path")
    datasets: list[str] | None = Field(default=None, description="default: the keys of `problems`, else the spec's")
    problems: Path | dict[str, Path] | None = None
    format: str | None = Field(default=None, description="loader format when the dataset has several")
    limit: int | None = Field(default=None, ge=1)
    max_new_tokens: int | None = Field(default=None, ge=1, description="default: the model config's budget")
    batch_size: int = Field(default=8, ge=1)
    decoding: Literal["recommended", "greedy"] = "recommended"
    seed: int = Field(default=0, ge=0, description="base seed of the per-problem sampling seeds")
    base_url: str | None = Field(default=None, description="OpenAI-compatible server (backend openai)")
    backend_options: dict[str, Any] = Field(default_factory=dict)

    @field_validator("backend")
    @classmethod
    def _backend(cls, v: str) -> str:
        return registered_name("backend", v)

    @field_validator("datasets")
    @classmethod
    def _datasets(cls, v: list[str] | None) -> list[str] | None:
        return None if v is None else [registered_name("dataset", d) for d in v]

    @field_validator("problems")
    @classmethod
    def _path(cls, v: Path | dict[str, Path] | None, info: ValidationInfo) -> Path | dict[str, Path] | None:
        if v is None:
            return None
        out: Path | dict[str, Path] = (
            {registered_name("dataset", k): resolve_path(p, info) for k, p in v.items()}
            if isinstance(v, dict) else resolve_path(v, info)
        )
        if check_files(info):
            missing = [str(p) for p in (out.values() if isinstance(out, dict) else [out]) if not p.is_file()]
            if missing:
                raise ValueError(f"problems file(s) not found: {', '.join(missing)}")
        return out

    @model_validator(mode="after")
    def _consistent(self) -> Generation:
        if isinstance(self.problems, dict) and self.datasets is not None:
            lacking = [d for d in self.datasets if d not in self.problems]
            if lacking:
                raise ValueError(f"no `problems` file for dataset(s) {', '.join(lacking)}; "
                                 "give `problems: {DATASET: FILE, ...}` for each of `datasets`")
        if isinstance(self.problems, Path) and self.datasets is not None and len(self.datasets) != 1:
            raise ValueError("one `problems` file serves one dataset; for several, give "
                             "`problems: {DATASET: FILE, ...}`")
        return self

    def jobs(self, spec_datasets: list[str], teacher: str) -> list[tuple[str, Path]]:
        """(dataset, problems file) pairs to generate; SpecError when a file is missing."""
        datasets = self.datasets or (list(self.problems) if isinstance(self.problems, dict) else list(spec_datasets))
        if self.problems is None:
            raise SpecError(f"teacher {teacher!r}: generation needs `generate.problems` (the dataset file in its "
                            "public format, e.g. GSM8K test.jsonl, or {DATASET: FILE, ...})")
        if isinstance(self.problems, Path):
            if len(datasets) != 1:
                raise SpecError(f"teacher {teacher!r}: one `generate.problems` file serves one dataset, but the "
                                f"datasets are {', '.join(datasets)}; set `generate.datasets: [NAME]` or give "
                                "`problems: {DATASET: FILE, ...}`")
            return [(datasets[0], self.problems)]
        return [(d, self.problems[d]) for d in datasets]


class Teacher(Strict):
    """A teacher: trace files to ingest (optionally only the records whose `model` field is
    `select`, for files that hold several models), or a generation backend. Trace files are read as
    `format` (`auto`: told by their content; or a format of `legival list formats`: an Inspect AI log,
    lm-evaluation-harness samples, a Hugging Face dataset, an OpenAI batch output), with the source's
    options: `dataset` (when the source does not name it), `map` ({trace field: column}), `requests`
    (an OpenAI batch input file), `problems` (the dataset's problems file, for the gold answers)."""

    name: str = Field(min_length=1)
    format: str = "auto"
    """Before `traces`: their check asks the format what an input of it is."""
    traces: list[Path] = Field(default_factory=list)
    select: str | None = None
    generate: Generation | None = None
    dataset: str | None = None
    map: dict[str, str] = Field(default_factory=dict)
    requests: Path | None = None
    problems: Path | None = None

    @field_validator("format")
    @classmethod
    def _format(cls, v: str) -> str:
        return v if v == AUTO else registered_name("format", v)

    @field_validator("dataset")
    @classmethod
    def _dataset(cls, v: str | None) -> str | None:
        return v if v is None else registered_name("dataset", v)

    @field_validator("map")
    @classmethod
    def _map(cls, v: dict[str, str]) -> dict[str, str]:
        parse_mapping(",".join(f"{k}={c}" for k, c in v.items()))  # the same checks as `--map`
        return v

    @field_validator("requests", "problems")
    @classmethod
    def _source_file(cls, v: Path | None, info: ValidationInfo) -> Path | None:
        return optional_file(v, info, "file")

    def source_options(self) -> SourceOptions:
        """What the trace source reads besides a file (`readers.sources.SourceOptions`)."""
        return SourceOptions(dataset=self.dataset, mapping=tuple(self.map.items()), requests=self.requests,
                             problems=self.problems, teacher=self.name)

    @field_validator("name")
    @classmethod
    def _name(cls, v: str) -> str:
        return check_name(v, "teacher name")

    @field_validator("traces")
    @classmethod
    def _paths(cls, v: list[Path], info: ValidationInfo) -> list[Path]:
        out = [resolve_path(p, info) for p in v]
        if check_files(info):
            fmt = str((info.data or {}).get("format") or AUTO)
            try:
                missing = [str(p) for p in out if not input_present(p, fmt)]
            except UnknownName:  # the format itself is wrong: its own field says so
                missing = [str(p) for p in out if not p.exists()]
            if missing:
                raise ValueError(f"trace file(s) not found: {', '.join(missing)}")
        return out

    @model_validator(mode="after")
    def _one_source(self) -> Teacher:
        if bool(self.traces) == (self.generate is not None):
            raise ValueError(f"teacher {self.name!r}: give exactly one of `traces: [FILE, ...]` or `generate: {{...}}`")
        if self.select is not None and not self.traces:
            raise ValueError(f"teacher {self.name!r}: `select` filters trace files; it needs `traces`")
        if self.select is not None and self.format not in (AUTO, OWN):
            raise ValueError(f"teacher {self.name!r}: `select` keeps the records of one model in Legi-Val's own "
                             f"trace files; a {self.format} source holds one teacher (drop `select`)")
        if self.generate is not None and (self.format != AUTO or self.dataset or self.map or self.requests
                                          or self.problems):
            raise ValueError(f"teacher {self.name!r}: `format`, `dataset`, `map`, `requests` and `problems` "
                             "describe trace files; a generating teacher has none")
        return self
