"""The benchmark spec: one YAML file that says what `legival run` computes (issue 4).

Validated by pydantic at the boundary, with messages that say what to fix: an unknown key names the
allowed keys, a choice names the allowed values, and every message carries the dotted location of
the offending field (`teachers.2.traces`). Relative paths resolve against the spec file's folder, so
a spec and its data can move together.

Only fields that change results reach the stores' content keys (through `StudentConfig`); execution
settings (Ray address, engines, chunk sizes, retries) never do, so moving a benchmark from a laptop
to a GPU cluster reuses every stored artifact.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any, Literal

import yaml
from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    ValidationError,
    ValidationInfo,
    field_validator,
    model_validator,
)

from legival_core.transfer.planner import DEFAULT_STUDENT_MODEL, StudentConfig

StudentBackend = Literal["embedded", "vllm", "openai", "scripted-demo"]
"""`scripted-demo` is the deterministic test student registered by `tasks.scripted_students`."""

JudgeName = Literal["lexical", "gemini", "openai-compatible"]
_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._/@:+-]*$")


class SpecError(ValueError):
    """A spec that does not validate; the message lists every problem with its location."""


class _Strict(BaseModel):
    """Rejects unknown keys with the list of allowed ones (pydantic's own message omits it)."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    @model_validator(mode="before")
    @classmethod
    def _known_keys(cls, data: Any) -> Any:
        if isinstance(data, dict):
            allowed = set(cls.model_fields)
            unknown = sorted(str(k) for k in data if k not in allowed)
            if unknown:
                raise ValueError(
                    f"unknown key(s) {', '.join(unknown)}; allowed: {', '.join(sorted(allowed))}"
                )
        return data


def _resolve(p: Path, info: ValidationInfo) -> Path:
    base = (info.context or {}).get("base_dir")
    p = Path(p).expanduser()
    return p if p.is_absolute() or base is None else (Path(base) / p).resolve()


def _check_name(v: str, what: str) -> str:
    if not _NAME.match(v):
        raise ValueError(f"{what} {v!r}: use letters, digits and . _ / @ : + - (no spaces)")
    return v


GenerationBackend = Literal["embedded", "vllm", "openai", "scripted-demo"]
"""`scripted-demo` is the deterministic test backend registered by `tasks.scripted_students`."""


def _canonical_dataset(name: str) -> str:
    from legival_core.registry import UnknownName, canonical_name

    try:
        return canonical_name("dataset", name)
    except UnknownName as e:
        raise ValueError(str(e)) from None


class Generation(_Strict):
    """Teacher trace generation (`legival generate --spec`, `legival run`) by `backend` with `model`,
    on the problems of `problems` (one dataset file, or {dataset: FILE}). `decoding: recommended`
    samples with the model config's temperature/top_p/top_k (seeded per problem from `seed`);
    `decoding: greedy` decodes greedily."""

    backend: GenerationBackend
    model: str = Field(min_length=1)
    config: str | None = Field(default=None, description="model config: a configs/models stem or a YAML path")
    datasets: list[str] | None = Field(default=None, description="default: the keys of `problems`, else the spec's")
    problems: Path | dict[str, Path] | None = None
    format: str | None = Field(default=None, description="loader format when the dataset has several")
    limit: int | None = Field(default=None, ge=1)
    max_new_tokens: int = Field(default=4096, ge=1)
    batch_size: int = Field(default=8, ge=1)
    decoding: Literal["recommended", "greedy"] = "recommended"
    seed: int = Field(default=0, ge=0, description="base seed of the per-problem sampling seeds")
    base_url: str | None = Field(default=None, description="OpenAI-compatible server (backend openai)")
    backend_options: dict[str, Any] = Field(default_factory=dict)

    @field_validator("datasets")
    @classmethod
    def _datasets(cls, v: list[str] | None) -> list[str] | None:
        return None if v is None else [_canonical_dataset(d) for d in v]

    @field_validator("problems")
    @classmethod
    def _path(cls, v: Path | dict[str, Path] | None, info: ValidationInfo) -> Path | dict[str, Path] | None:
        if v is None:
            return None
        out: Path | dict[str, Path] = (
            {_canonical_dataset(k): _resolve(p, info) for k, p in v.items()} if isinstance(v, dict) else _resolve(v, info)
        )
        if (info.context or {}).get("check_files", True):
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


class Teacher(_Strict):
    """A teacher: trace files to ingest (optionally only the records whose `model` field is
    `select`, for files that hold several models), or a generation backend."""

    name: str = Field(min_length=1)
    traces: list[Path] = Field(default_factory=list)
    select: str | None = None
    generate: Generation | None = None

    @field_validator("name")
    @classmethod
    def _name(cls, v: str) -> str:
        return _check_name(v, "teacher name")

    @field_validator("traces")
    @classmethod
    def _paths(cls, v: list[Path], info: ValidationInfo) -> list[Path]:
        out = [_resolve(p, info) for p in v]
        if (info.context or {}).get("check_files", True):
            missing = [str(p) for p in out if not p.is_file()]
            if missing:
                raise ValueError(f"trace file(s) not found: {', '.join(missing)}")
        return out

    @model_validator(mode="after")
    def _one_source(self) -> Teacher:
        if bool(self.traces) == (self.generate is not None):
            raise ValueError(f"teacher {self.name!r}: give exactly one of `traces: [FILE, ...]` or `generate: {{...}}`")
        if self.select is not None and not self.traces:
            raise ValueError(f"teacher {self.name!r}: `select` filters trace files; it needs `traces`")
        return self


class Decoding(_Strict):
    max_new_tokens: int | None = Field(default=None, ge=1, description="default: transfer.max_new_tokens")
    forcing_max_tokens: int = Field(default=100, ge=1)


class Student(_Strict):
    name: str = Field(min_length=1)
    backend: StudentBackend = "embedded"
    model: str = DEFAULT_STUDENT_MODEL
    dtype: Literal["float32", "bfloat16", "float16", "auto"] = "float32"
    decoding: Decoding = Decoding()
    backend_options: dict[str, Any] = Field(default_factory=dict)
    engine_config: Path | None = Field(default=None, description="YAML of backend options (infra/vllm/*.yaml)")

    @field_validator("name")
    @classmethod
    def _name(cls, v: str) -> str:
        return _check_name(v, "student name")

    @field_validator("engine_config")
    @classmethod
    def _engine_config(cls, v: Path | None, info: ValidationInfo) -> Path | None:
        if v is None:
            return None
        p = _resolve(v, info)
        if (info.context or {}).get("check_files", True) and not p.is_file():
            raise ValueError(f"engine config not found: {p}")
        return p

    def options(self) -> dict[str, Any]:
        """Backend options: the engine config file's, overridden by inline `backend_options`."""
        base: dict[str, Any] = {}
        if self.engine_config is not None:
            loaded = yaml.safe_load(self.engine_config.read_text(encoding="utf-8")) or {}
            if not isinstance(loaded, dict):
                raise SpecError(f"{self.engine_config}: an engine config is a mapping of backend options")
            base = dict(loaded)
        return {**base, **self.backend_options}


class Efficiency(_Strict):
    tau: float = Field(default=0.8, gt=0.0, le=1.0)
    model: str = "all-MiniLM-L6-v2"


class Transfer(_Strict):
    enabled: bool = True
    step_interval: int = Field(default=3, ge=1)
    max_new_tokens: int = Field(default=1024, ge=1)
    limit: int | None = Field(default=None, ge=1, description="first N transfer traces per (teacher, dataset)")
    profile: Literal["spec", "preprint"] = "spec"
    n_bins: int = Field(default=50, ge=1)


class Judge(_Strict):
    name: JudgeName = "lexical"
    model: str | None = None
    enabled: bool = True
    concurrency: int = Field(default=16, ge=1)
    rpm: float | None = Field(default=None, gt=0)
    max_cost_usd: float | None = Field(default=None, ge=0)
    base_url: str | None = None
    limit: int | None = Field(default=None, ge=1)

    @model_validator(mode="after")
    def _model_needed(self) -> Judge:
        if self.name == "openai-compatible" and self.enabled and not self.model:
            raise ValueError("judge 'openai-compatible' needs `model` (the served model id)")
        return self


class Quality(_Strict):
    enabled: bool = False
    metrics: list[str] | None = None


class Report(_Strict):
    out: Path = Path("report")

    @field_validator("out")
    @classmethod
    def _path(cls, v: Path, info: ValidationInfo) -> Path:
        return _resolve(v, info)


class Execution(_Strict):
    """Where and how wide to run; never part of a content key."""

    ray_address: str = Field(default="local", description="'local' starts Ray in-process; else 'auto' or ray://HOST:10001")
    local_cpus: int | None = Field(default=None, ge=1, description="CPUs of the local Ray (default: all)")
    gpus_per_engine: float = Field(default=0.0, ge=0)
    cpus_per_engine: float = Field(default=1.0, gt=0)
    max_concurrent_engines: int = Field(default=1, ge=1)
    traces_per_chunk: int = Field(default=4, ge=1)
    max_concurrent_shards: int = Field(default=4, ge=1)
    retries: int = Field(default=2, ge=0)


class BenchmarkSpec(_Strict):
    name: str = "legival"
    store: Path = Path("legival.duckdb")
    teachers: list[Teacher] = Field(min_length=1)
    datasets: list[str] = Field(min_length=1)
    students: list[Student] = Field(default_factory=lambda: [Student(name="smollm2-135m")])
    efficiency: Efficiency = Efficiency()
    transfer: Transfer = Transfer()
    judge: Judge = Judge()
    quality: Quality = Quality()
    report: Report = Report()
    execution: Execution = Execution()

    @field_validator("store")
    @classmethod
    def _store(cls, v: Path, info: ValidationInfo) -> Path:
        return _resolve(v, info)

    @field_validator("datasets")
    @classmethod
    def _datasets(cls, v: list[str]) -> list[str]:
        from legival_core.registry import UnknownName, canonical_name

        try:
            return [canonical_name("dataset", d) for d in v]
        except UnknownName as e:
            raise ValueError(str(e)) from None

    @model_validator(mode="after")
    def _unique(self) -> BenchmarkSpec:
        for what, names in (("teacher", [t.name for t in self.teachers]), ("student", [s.name for s in self.students])):
            dup = sorted({n for n in names if names.count(n) > 1})
            if dup:
                raise ValueError(f"duplicate {what} name(s): {', '.join(dup)}")
        for t in self.teachers:
            g = t.generate
            if g is None or g.problems is None:
                continue
            try:
                jobs = g.jobs(self.datasets, t.name)
            except SpecError as e:
                raise ValueError(str(e)) from None
            outside = [d for d, _ in jobs if d not in self.datasets]
            if outside:
                raise ValueError(f"teacher {t.name!r} generates on {', '.join(outside)}, which is not in "
                                 f"`datasets` ({', '.join(self.datasets)})")
        return self

    def generating_teachers(self, names: list[str] | None = None) -> list[Teacher]:
        """The teachers with `generate` (of `names`, when given); SpecError for a named teacher without it."""
        if not names:
            return [t for t in self.teachers if t.generate is not None]
        chosen = [self.teacher(n) for n in names]
        plain = [t.name for t in chosen if t.generate is None]
        if plain:
            raise SpecError(f"teacher(s) {', '.join(plain)} have trace files, not `generate`; "
                            "`legival ingest`/`legival run` stores them")
        return chosen

    def teacher(self, name: str) -> Teacher:
        for t in self.teachers:
            if t.name == name:
                return t
        raise SpecError(f"no teacher {name!r} in the spec; teachers: {', '.join(t.name for t in self.teachers)}")

    def student_config(self, student: Student) -> StudentConfig:
        """The library's student config: decoding from the student, budgets from `transfer`."""
        return StudentConfig(
            name=student.name,
            backend=student.backend,
            model=student.model,
            dtype=student.dtype,
            max_new_tokens=student.decoding.max_new_tokens or self.transfer.max_new_tokens,
            forcing_max_tokens=student.decoding.forcing_max_tokens,
            step_interval=self.transfer.step_interval,
            n_bins=self.transfer.n_bins,
            profile=self.transfer.profile,
            backend_options=student.options(),
        )


def parse_spec(data: Any, base_dir: str | Path | None = None, source: str = "spec", check_files: bool = True) -> BenchmarkSpec:
    """Validate a spec mapping; `base_dir` anchors relative paths. Raises SpecError."""
    if not isinstance(data, dict):
        raise SpecError(f"{source}: the top level must be a mapping of keys (teachers, datasets, ...)")
    ctx = {"base_dir": str(base_dir) if base_dir is not None else None, "check_files": check_files}
    try:
        return BenchmarkSpec.model_validate(data, context=ctx)
    except ValidationError as e:
        raise SpecError(format_errors(e, source)) from None


def load_spec(path: str | Path, check_files: bool = True) -> BenchmarkSpec:
    path = Path(path)
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as e:
        raise SpecError(f"cannot read spec {path}: {e.strerror}") from None
    try:
        data = yaml.safe_load(text)
    except yaml.YAMLError as e:
        raise SpecError(f"{path}: not valid YAML: {e}") from None
    return parse_spec(data, path.resolve().parent, str(path), check_files)


def format_errors(e: ValidationError, source: str) -> str:
    lines = [f"{source}: {e.error_count()} problem(s):"]
    for err in e.errors(include_url=False):
        loc = ".".join(str(x) for x in err["loc"]) or "<top>"
        msg = err["msg"].removeprefix("Value error, ")
        if err["type"] == "literal_error":
            msg = f"{msg} (got {err.get('input')!r})"
        lines.append(f"  {loc}: {msg}")
    return "\n".join(lines)
