"""The throughput table (`configs/throughput.yaml`): one engine's rates by accelerator and model size.

Typed and validated at load. A row holds the rates of the transfer cost model
(`legival_core.transfer.cost.Rates`) and where they come from: `basis` (measured here, published
elsewhere, or an assumption) and `source` (the measurement, or the citation), which the plan prints
next to every estimate made from it; an estimate from a row that is not a measurement of the same
kind of machine comes with its range (`spread`: the factor its figures may be off either way). The
file also holds the decode the plan assumes of a student with no stored rollouts (`decode`).
"""

from __future__ import annotations

from pathlib import Path
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from legival_core.catalog import canonical_model
from legival_core.transfer.cost import Rates

THROUGHPUT_FILE = Path(__file__).resolve().parents[2] / "configs" / "throughput.yaml"


class ThroughputError(ValueError):
    """The throughput table is unreadable, or has no row for the model and accelerator asked."""


Basis = Literal["measured", "published", "assumption"]


class Row(BaseModel):
    """One engine's rates for models up to `max_params_b` on `accelerator` (`transfer.cost.Rates`)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    accelerator: str = Field(min_length=1)
    max_params_b: float = Field(gt=0)
    models: tuple[str, ...] = Field(default=(), description=(
        "the models this row is for alone (ids as in `models:`); such a row wins over the rows by size"))
    prefill_tok_s: float = Field(gt=0, description="prompt tokens computed per second")
    decode_tok_s: float = Field(gt=0, description="tokens generated per second, the per-step cost apart")
    decode_step_s: float = Field(ge=0, description="seconds of one forward pass (weights read once), whatever the batch")
    context_tok_s: float = Field(gt=0, description="context tokens attended to per second while decoding")
    chunk_s: float = Field(ge=0, description="fixed seconds per chunk (calls, tokenizing, grading)")
    load_s: float = Field(ge=0, description="seconds to start an engine (load the model)")
    basis: Basis = Field(description="measured (on this kind of machine), published (a cited benchmark), assumption")
    spread: float = Field(default=1.0, ge=1.0, description=(
        "the factor the figures may be off either way: the plan prints time / spread .. time x spread"))
    source: str = Field(min_length=1, description="where the figures come from (measured where, or the citation)")

    @model_validator(mode="after")
    def _spread_of_a_guess(self) -> Row:
        if self.basis != "measured" and self.spread <= 1.0:
            raise ValueError(f"a row whose basis is {self.basis} needs a spread > 1 (how far off its figures may be)")
        return self

    def rates(self) -> Rates:
        return Rates(self.chunk_s, self.prefill_tok_s, self.decode_step_s, self.decode_tok_s, self.context_tok_s, self.load_s)


class DecodeDefaults(BaseModel):
    """What the plan expects of a student's rollouts before any is stored (`transfer.cost.Expected`)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    first_share: float = Field(gt=0, le=1, description="mean first-pass tokens as a share of max_new_tokens")
    first_at_budget: float = Field(ge=0, le=1, description="share of first passes that run to max_new_tokens")
    forced_share: float = Field(ge=0, le=1, description="share of rollouts that need the forcing pass")
    forced_tokens: float = Field(gt=0, description="mean tokens of a forcing pass")
    forced_at_budget: float = Field(ge=0, le=1, description="share of forcing passes that run to forcing_max_tokens")
    source: str = Field(min_length=1)


class Table(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    models: dict[str, float] = Field(default_factory=dict, description="model id -> parameters in billions")
    decode: DecodeDefaults
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
        names = {model, canonical_model(model)}
        own = [r for r in self.throughput if r.accelerator == accelerator and names & set(r.models)]
        if own:
            return own[0]
        rows = sorted((r for r in self.throughput if r.accelerator == accelerator and r.max_params_b >= size
                       and not r.models), key=lambda r: r.max_params_b)
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
