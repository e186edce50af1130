"""What a dataset is to Legi-Val: a name, loaders for its public file formats, and a grader.

A new dataset is one `DatasetSpec` passed to `register_dataset` in its own module (see AGENTS.md):
the loader turns the public file into `Problem`s, the grader turns a model's text into a `Grade`.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Literal

from legival_core.registry import register
from legival_core.types import Grade, Problem

if TYPE_CHECKING:
    import polars as pl

Role = Literal["teacher", "student"]
"""Teachers: the LAST answer in the answer text wins (falling back to the end of the reasoning).
Students: the FIRST explicit answer in the continuation wins, and a bare number never counts."""

Grader = Callable[[str, str, Problem, Role], Grade]
"""grade(answer_text, reasoning, problem, role) -> Grade."""

Loader = Callable[[Path], Iterator[Problem]]


@dataclass(frozen=True, slots=True)
class DatasetSpec:
    """A dataset: its loaders, grader, student prompts and judge rubric (registered by `register_dataset`)."""

    name: str
    grader: Grader
    loaders: dict[str, Loader] = field(default_factory=dict)
    aliases: tuple[str, ...] = ()
    system_prompt: str = ""
    forcing_text: str = "The answer is \\boxed{"
    grader_version: str = "1"
    judge_rubric: str = ""
    """The backtracking judge's system prompt for this dataset ("" : the judge skips its traces)."""
    task_patterns: tuple[str, ...] = ()
    """Names evaluation tools give this dataset's tasks (fnmatch patterns, lower case: Inspect AI's
    `inspect_evals/gsm8k`, lm-evaluation-harness's `minerva_math_algebra`...), so that their logs are read
    as this dataset without `--dataset` (`grading.sources.dataset_of_task`)."""

    def load(self, path: Path, fmt: str | None = None) -> Iterator[Problem]:
        if fmt is None:
            if len(self.loaders) != 1:
                raise ValueError(
                    f"dataset {self.name!r} has several loaders ({', '.join(self.loaders)}); pass fmt"
                )
            fmt = next(iter(self.loaders))
        if fmt not in self.loaders:
            raise ValueError(f"dataset {self.name!r} has no format {fmt!r} (its formats: "
                             f"{', '.join(self.loaders) or 'none'})")
        return self.loaders[fmt](path)


def register_dataset(spec: DatasetSpec) -> DatasetSpec:
    """Register the dataset and its grader, each with a line `legival list` shows (the spec is an
    instance, so no docstring of its own describes it)."""
    formats = ", ".join(spec.loaders) or "no file loader"
    register("dataset", spec.name, spec, aliases=spec.aliases,
             description=f"{spec.name} problems ({formats}); grader version {spec.grader_version}")
    register("grader", spec.name, spec.grader, aliases=spec.aliases,
             description=f"answer grader of {spec.name} (version {spec.grader_version})")
    return spec


def get_dataset(name: str) -> DatasetSpec:
    from legival_core.registry import get

    spec: DatasetSpec = get("dataset", name)
    return spec


def grader_key(dataset: str) -> str:
    """The key grades are stored under: `<dataset>@<grader_version>` (a new grader version re-grades)."""
    spec = get_dataset(dataset)
    return f"{spec.name}@{spec.grader_version}"


def current_graders(datasets: list[str]) -> pl.DataFrame:
    """(dataset, grader key) of the grader version this code uses, for each dataset."""
    import polars as pl

    return pl.DataFrame({"dataset": datasets, "grader": [grader_key(d) for d in datasets]},
                        schema={"dataset": pl.Utf8, "grader": pl.Utf8})
