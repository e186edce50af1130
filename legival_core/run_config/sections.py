"""The benchmark spec's sections. Every default of the system lives here: the CLI commands build
their settings from these models (an option only overrides), so `legival transfer`, `legival run`
and the Prefect flows cannot disagree.

Only fields that change results reach the stores' content keys; execution settings (Ray address,
engines, chunk sizes, retries, concurrency) never do, so moving a benchmark from a laptop to a GPU
cluster reuses every stored artifact.
"""

from __future__ import annotations

from pathlib import Path
from typing import Literal

from pydantic import Field, ValidationInfo, field_validator, model_validator

from legival_core.catalog import MINILM
from legival_core.readers.input_files import MAX_RECORD_BYTES
from legival_core.readers.trace_records import MAX_TRACE_BYTES
from legival_core.run_config.base import Strict, registered_name, resolve_path

Profile = Literal["spec", "preprint"]


class Ingest(Strict):
    """The input boundary (`legival ingest`, a spec's trace files, generated records): text is
    validated once, here, and nothing downstream re-validates it."""

    max_trace_bytes: int = Field(default=MAX_TRACE_BYTES, ge=1, description=(
        "a trace whose reasoning + answer is longer (UTF-8 bytes) is skipped and counted (`too_large`), "
        "not stored: a degenerate output of that size is a repetition loop, not reasoning"))
    repair_text: bool = Field(default=False, description=(
        "replace invalid Unicode (lone surrogates, NUL, non-characters) by U+FFFD and count the repaired "
        "records, instead of refusing the line"))
    max_record_bytes: int = Field(default=MAX_RECORD_BYTES, ge=1, description=(
        "what one record of an input may hold once decompressed (a line of a JSONL file, a member of an "
        "Inspect .eval log), counted while it is read: a longer line is an error naming it, a larger .eval "
        "sample a counted skip, a larger log header or summary an error; a decompression bomb ends in seconds"))


class Efficiency(Strict):
    """Token/step length, redundancy (embedding model, threshold tau) and lexical backtracking."""

    tau: float = Field(default=0.8, gt=0.0, le=1.0, description="redundancy threshold (SPEC: 0.8)")
    model: str = Field(default=MINILM, min_length=1, description="sentence-embedding model id or local path")
    embed_backend: str = Field(default="auto", description=(
        "auto | torch | onnx | openvino: how sentences are embedded (auto: torch on a GPU, ONNX Runtime on a CPU); "
        "fp32 backends agree within 1e-6, so it is never part of a key"))
    embed_precision: str = Field(default="fp32", description=(
        "fp32 | int8 (opt-in: ONNX Runtime dynamic quantisation, faster and approximate; its rows and "
        "cached vectors are stored apart from fp32's; agreement in docs/orchestration.md)"))
    num_gpus: float | None = Field(default=None, ge=0, description=(
        "GPUs per embedding worker when the stage runs as Ray work on a cluster "
        "(default: execution.gpus_per_engine)"))

    @field_validator("embed_backend")
    @classmethod
    def _backend(cls, v: str) -> str:
        from legival_core.embed import check_backend

        return check_backend(v)

    @field_validator("embed_precision")
    @classmethod
    def _precision(cls, v: str) -> str:
        from legival_core.embed import check_precision

        return check_precision(v)


class Transfer(Strict):
    """Student rollouts on prefixes of correct teacher traces (SPEC section 4)."""

    enabled: bool = True
    step_interval: int = Field(default=3, ge=1, description="s in K = {0, s, 2s, ..., m}")
    max_new_tokens: int = Field(default=1024, ge=1, description="token budget of each continuation (SPEC: 1024)")
    limit: int | None = Field(default=None, ge=1, description="first N transfer traces per (teacher, dataset)")
    profile: Profile = "spec"
    n_bins: int = Field(default=50, ge=2, description="B, the bins of the prefix fraction k/m")
    early_answering: bool = Field(default=False, description="also each generating teacher's own model as an "
                                  "early-answer reader of its traces (docs/transfer.md \"Early answering\")")


class Judge(Strict):
    """Backtracking by an LLM judge (`lexical`: the cue-based fallback, no API)."""

    name: str = "lexical"
    model: str | None = None
    enabled: bool = True
    concurrency: int = Field(default=16, ge=1)
    rpm: float | None = Field(default=None, gt=0)
    max_cost_usd: float | None = Field(default=None, ge=0)
    base_url: str | None = None
    limit: int | None = Field(default=None, ge=1)

    @field_validator("name")
    @classmethod
    def _registered(cls, v: str) -> str:
        return registered_name("judge", v)

    @model_validator(mode="after")
    def _model_needed(self) -> Judge:
        if self.name == "openai-compatible" and self.enabled and not self.model:
            raise ValueError("judge 'openai-compatible' needs `model` (the served model id)")
        return self


class Quality(Strict):
    """gCoT text-quality metrics; `metrics` takes group or metric names (default: every group)."""

    enabled: bool = False
    metrics: list[str] | None = None

    @field_validator("metrics")
    @classmethod
    def _known(cls, v: list[str] | None) -> list[str] | None:
        if v is None:
            return None
        from legival_core.quality.group import resolve_groups

        resolve_groups(v)  # ValueError names the known groups and metrics
        return v


class Report(Strict):
    out: Path = Path("report")
    resamples: int = Field(default=1000, ge=0, description="bootstrap resamples over problems (0 = no intervals)")
    seed: int = Field(default=0, ge=0, description="bootstrap seed")
    dashboard_traces: int = Field(default=10, ge=0, description="traces per (teacher, dataset) in index.html")

    @field_validator("out")
    @classmethod
    def _path(cls, v: Path, info: ValidationInfo) -> Path:
        return resolve_path(v, info)


class Execution(Strict):
    """Where and how wide to run; never part of a content key."""

    ray_address: str = Field(default="local", description="'local' starts Ray in-process; else 'auto' or ray://HOST:10001")
    unit_timeout_s: float | None = Field(default=300.0, gt=0, description=(
        "seconds one unit (a trace's metrics, its rollouts, a quality record) may compute before it fails "
        "alone, stored with the reason (docs/CLI.md 'Failure contract'); a 150 KB degenerate trace takes "
        "~6 s to segment. Enforced in-process on the main thread and in worker processes; null: no limit"))
    connect_timeout_s: float = Field(default=15.0, gt=0, description=(
        "seconds the Ray cluster (`ray_address`) and the Prefect API (PREFECT_API_URL) get to answer before a "
        "run fails, naming the one that did not"))
    local_cpus: int | None = Field(default=None, ge=1, description="CPUs of the local Ray (default: all)")
    gpus_per_engine: float = Field(default=0.0, ge=0)
    accelerator: str | None = Field(default=None, min_length=1, description=(
        "GPU kind of the engines for `legival plan`'s time estimate, a kind in configs/throughput.yaml "
        "(e.g. h100-80gb); default: cpu when gpus_per_engine is 0"))
    cpus_per_engine: float = Field(default=1.0, gt=0)
    max_concurrent_engines: int = Field(default=1, ge=1)
    engine_labels: dict[str, str] = Field(
        default_factory=dict,
        description="Ray node labels the student engines prefer (e.g. {'legival.io/engine': 'student'}; a node "
                    "gets them from `ray start --labels`); an engine goes to any node with room when no live "
                    "node has them, e.g. after that node died (default: no preference)")
    traces_per_chunk: int = Field(default=4, ge=1)
    max_concurrent_shards: int = Field(default=4, ge=1)
    retries: int = Field(default=2, ge=0, description="retries of a shard task after a transient failure; also how "
                         "often one engine may be lost (and recreated) within a shard's run")

    @property
    def accelerator_kind(self) -> str:
        """The engines' kind as the plan and the recorded timings name it: `accelerator`, else cpu when
        the engines have no GPU, else "" (a GPU of unnamed kind)."""
        return self.accelerator or ("cpu" if self.gpus_per_engine == 0 else "")
