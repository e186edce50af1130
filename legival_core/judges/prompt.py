"""The backtracking judge's prompt (SPEC section 3; Legi-Val appendix A.3).

The per-dataset system instructions (rubrics) live with their dataset (`DatasetSpec.judge_rubric` in
`legival_core/datasets/<name>.py`), so a new dataset brings its rubric in its own module; the reply
format around a rubric (the JSON structure `reply.parse_judgement` reads, and the closing line asking for
JSON only) is written once, here (`rubric_prompt`), each dataset filling in its descriptions of the fields.

Provenance. The system instructions for `math`, `gpqa` and `connections`, the trace wrapper
(`Reasoning trace: / --- TRACE START --- / --- TRACE END ---`), the schema text and the JSON-repair
prompt are copied verbatim from the paper's public code, ippolito-cmu/legible_cot_preprint at commit
921eeddd356862ea80adf443165f75a62660f276: `src/utils/prompts.py` (`system_instruction_backtracking_*`)
and `src/scripts/analyze_backtracking.py` (`build_backtracking_prompt`, `_schema_text`,
`build_reprocess_prompt`). Typos in the originals ("an an alternative") are kept on purpose: changing a
judge prompt changes its output.

Written here (not in the paper's code): the `gsm8k` and `lsat` rubrics, modelled on the math and gpqa
ones; the numbered-step rendering of the trace (the paper sends the raw trace; SPEC section 3 requires
the judge to see steps numbered from 1, so each step is written as `[k] sentence` inside the paper's
wrapper, with one line saying what the numbers are); the excerpt note used when a long trace is split
into windows; and the optional question block (off by default, as in the paper).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from legival_core.datasets.base import JudgeRubric

PROMPT_VERSION = "bt-a3-921eedd-v1"
"""Bumped whenever any text below, or a dataset's `judge_rubric`, changes; part of every judge's cache key."""


def has_rubric(dataset: str) -> bool:
    """Whether the judge can grade this dataset's traces (its module defines `judge_rubric`)."""
    from legival_core.datasets.base import get_dataset
    from legival_core.registry import UnknownName

    try:
        return get_dataset(dataset).judge_rubric is not None
    except UnknownName:
        return False


def system_prompt(dataset: str) -> str:
    """The system prompt for a dataset: its `DatasetSpec.judge_rubric` written by `rubric_prompt`; a
    dataset without one is an error (a silent fallback would mix rubrics)."""
    from legival_core.datasets.base import get_dataset
    from legival_core.registry import names

    rubric = get_dataset(dataset).judge_rubric if has_rubric(dataset) else None
    if rubric is None:
        known = [d for d in names("dataset") if has_rubric(d)]
        raise ValueError(f"no backtracking rubric for dataset {dataset!r}; known: {', '.join(known)}")
    return rubric_prompt(rubric)


def rubric_prompt(rubric: JudgeRubric) -> str:
    """A dataset's rubric around the reply format, as the paper's rubrics write it (each of them
    verbatim): the task, the JSON structure with the dataset's descriptions of its fields, the rules, and
    the closing line asking for one JSON object only."""
    return (
        f"{rubric.task}\n\n"
        "You will be given a reasoning trace as input. You must return a JSON object with the following "
        "structure:\n"
        "{\n"
        '  "backtracking_detected": boolean,\n'
        f'  "final_answer": "{rubric.final_answer}",\n'
        '  "backtracking_steps": [\n'
        "    {\n"
        '      "step_number": int,\n'
        f'      "reason": "{rubric.reason}"\n'
        "    }\n"
        "  ],\n"
        '  "confidence": float (0.0 to 1.0),\n'
        f'  "overall_reasoning": "{rubric.overall_reasoning}"\n'
        "}\n\n"
        f"{rubric.rules}\n\n"
        "**Your Response:**\n"
        "- Your response MUST be a single, valid JSON object. Do not include any other text or formatting"
        f"{rubric.closing_note}.\n"
    )


def render_steps(steps: Sequence[str], first: int = 1) -> str:
    """One line per step, `[k] text`, numbered with the ORIGINAL step numbers starting at `first`."""
    return "\n".join(f"[{first + i}] {' '.join(s.split())}" for i, s in enumerate(steps))


def user_prompt(
    steps: Sequence[str],
    *,
    first: int = 1,
    m: int | None = None,
    question: str | None = None,
) -> str:
    """The paper's trace wrapper around the numbered steps.

    `m` is the number of steps of the whole trace; when the steps shown are a window (first > 1 or
    fewer than m steps) the judge is told so, and that the numbering is the whole trace's.
    """
    total = len(steps) if m is None else m
    last = first + len(steps) - 1
    head = ""
    if question is not None:
        head = f"Question:\n{question}\n\n"
    note = "The trace is split into numbered steps; `step_number` must be one of these numbers.\n"
    if first != 1 or last != total:
        note += (
            f"This is an excerpt: steps {first} to {last} of a trace with {total} steps. Judge only the "
            "steps shown, using their numbers as given.\n"
        )
    return (
        head
        + note
        + "Reasoning trace:\n--- TRACE START ---\n"
        + render_steps(steps, first)
        + "\n--- TRACE END ---\n"
    )


def schema_text() -> str:
    """Verbatim `_schema_text()` of the paper's analyze_backtracking.py."""
    return (
        "Return ONLY valid JSON (no markdown, no extra text).\n"
        "Schema (all keys required):\n"
        "{\n"
        '  "backtracking_detected": boolean,\n'
        '  "final_answer": string,\n'
        '  "backtracking_steps": [\n'
        "    {\n"
        '      "step_number": integer,\n'
        '      "reason": string\n'
        "    }\n"
        "  ],\n"
        '  "confidence": number,\n'
        '  "overall_reasoning": string\n'
        "}\n"
        "Constraints:\n"
        "- backtracking_steps must be [] if no backtracking.\n"
        "- confidence must be in [0, 1].\n"
    )


def repair_prompt(bad_output: str, problem: str) -> str:
    """The paper's `build_reprocess_prompt` verbatim, plus one line naming what was wrong (ours)."""
    return (
        "You are a JSON repair tool. "
        "You will be given an invalid or truncated JSON-like output. "
        "Your job is to output ONLY valid JSON that matches the schema.\n\n"
        f"{schema_text()}\n"
        "Here is the invalid output to repair (may be incomplete):\n"
        "--- BAD OUTPUT START ---\n"
        f"{bad_output}\n"
        "--- BAD OUTPUT END ---\n\n"
        f"Problem found: {problem}\n\n"
        "Output ONLY the repaired JSON."
    )


RESPONSE_JSON_SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {
        "backtracking_detected": {"type": "boolean"},
        "final_answer": {"type": "string"},
        "backtracking_steps": {
            "type": "array",
            "items": {
                "type": "object",
                "properties": {"step_number": {"type": "integer"}, "reason": {"type": "string"}},
                "required": ["step_number", "reason"],
                "additionalProperties": False,
            },
        },
        "confidence": {"type": "number"},
        "overall_reasoning": {"type": "string"},
    },
    "required": [
        "backtracking_detected",
        "final_answer",
        "backtracking_steps",
        "confidence",
        "overall_reasoning",
    ],
    "additionalProperties": False,
}
"""The paper's reply structure as a JSON Schema (the schema text above, made machine-readable)."""
