"""The throughput table (`configs/throughput.yaml`): tokens/s per engine by accelerator and model size.

Typed and validated at load; each row carries the source of its figures, which the plan prints next
to every estimate made from it (a wall time from an assumption must say so).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from legival_core.catalog import canonical_model

THROUGHPUT_FILE = Path(__file__).resolve().parents[2] / "configs" / "throughput.yaml"


class ThroughputError(ValueError):
    """The throughput table is unreadable, or has no row for the model and accelerator asked."""


class Row(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    accelerator: str = Field(min_length=1)
    max_params_b: float = Field(gt=0)
    prefill_tok_s: float = Field(gt=0)
    decode_tok_s: float = Field(gt=0)
    source: str = Field(min_length=1, description="where the figures come from (measured where, or an assumption)")


class Table(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    models: dict[str, float] = Field(default_factory=dict, description="model id -> parameters in billions")
    throughput: list[Row] = Field(min_length=1)

    def params_b(self, model: str) -> float | None:
        for name in (model, canonical_model(model)):
            if name in self.models:
                return self.models[name]
        return None

    def row(self, model: str, accelerator: str) -> Row:
        size = self.params_b(model)
        if size is None:
            raise ThroughputError(f"no parameter count for model {model!r} in {THROUGHPUT_FILE.name} "
                                  "(add it under `models:`)")
        rows = sorted((r for r in self.throughput if r.accelerator == accelerator and r.max_params_b >= size),
                      key=lambda r: r.max_params_b)
        if not rows:
            kinds = sorted({r.accelerator for r in self.throughput})
            raise ThroughputError(f"no throughput row for a {size:g}B model on {accelerator!r} in "
                                  f"{THROUGHPUT_FILE.name} (accelerators: {', '.join(kinds)})")
        return rows[0]


def load_table(path: Path = THROUGHPUT_FILE) -> Table:
    import yaml

    try:
        data = yaml.safe_load(path.read_text(encoding="utf-8"))
        return Table.model_validate(data)
    except OSError as e:
        raise ThroughputError(f"{path}: {e.strerror or e}") from None
    except yaml.YAMLError as e:
        raise ThroughputError(f"{path}: not valid YAML ({e})") from None
    except ValidationError as e:
        first = e.errors(include_url=False)[0]
        where = ".".join(str(x) for x in first["loc"])
        raise ThroughputError(f"{path}: {where}: {first['msg']}") from None


@dataclass(frozen=True, slots=True)
class TimeEstimate:
    """Wall time of one model's work over `engines` engines, and the GPU-hours it holds."""

    seconds: float
    gpu_hours: float
    engines: int
    source: str


def estimate_time(prefill_tokens: int, decode_tokens: int, row: Row, engines: int, gpus_per_engine: float) -> TimeEstimate:
    """Tokens over per-engine rates, the work spread evenly over `engines` (the shards' chunks are
    many and small, so the tail is short next to a paper-scale run)."""
    engines = max(1, engines)
    per_engine = (prefill_tokens / row.prefill_tok_s + decode_tokens / row.decode_tok_s) / engines
    seconds = math.ceil(per_engine)
    return TimeEstimate(seconds, round(seconds * engines * gpus_per_engine / 3600, 3), engines, row.source)
