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
class JudgeRubric:
    """A dataset's part of the backtracking judge's system prompt (SPEC section 3). The judge writes it
    around the one reply format its parser reads (`judges.prompt.rubric_prompt`): `task`, the JSON
    structure with this dataset's descriptions of its fields, `rules`, and the closing line asking for
    JSON only. Changing any of it changes judgements: bump `judges.prompt.PROMPT_VERSION`."""

    task: str
    """Who the judge is, what backtracking is on this dataset, and what indicates it."""
    final_answer: str
    """What the reply's `final_answer` holds."""
    reason: str
    """What each flagged step's `reason` explains."""
    rules: str
    """How to fill the fields (the paper's "Filtering Rules" section, and any other of the dataset's own)."""
    overall_reasoning: str = "A brief explanation of why the model's logic was considered linear or non-linear."
    """What the reply's `overall_reasoning` says."""
    closing_note: str = ""
    """Words ending the closing line's "Do not include any other text or formatting" (the paper's math
    rubric: " before or after the JSON")."""


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
    judge_rubric: JudgeRubric | None = None
    """The backtracking judge's rubric for this dataset (None: the judge skips its traces)."""
    task_patterns: tuple[str, ...] = ()
    """Names evaluation tools give this dataset's tasks (fnmatch patterns, lower case: Inspect AI's
    `inspect_evals/gsm8k`, lm-evaluation-harness's `minerva_math_algebra`...), so that their logs are read
    as this dataset without `--dataset` (`readers.sources.dataset_of_task`)."""
    gold_of_answer: Callable[[str], str | None] | None = None
    """The gold answer inside the dataset's own answer field, when it holds more (GSM8K's worked solution
    ending `#### N`): what a training loop's gold column carries (`legival_core/rl`). None: the field is
    the gold."""

    wrong_answer: Callable[[Problem, int], str | None] | None = None
    """A wrong answer for a problem, chosen by a seeded rule (`datasets.wrong_answers`): the target of
    a hint intervention (docs/monitorability.md). None: the dataset has no rule."""

    def gold_text(self, raw: str) -> str:
        """The gold of `raw`, a gold or the dataset's own answer field (`gold_of_answer`)."""
        found = self.gold_of_answer(raw) if self.gold_of_answer is not None else None
        return found if found else raw

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
