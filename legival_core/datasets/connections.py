"""NYT Connections: sixteen words to sort into four groups of four (SPEC section 2).

Gold is the canonical JSON of the four groups; a grade is correct only when all four groups match as
sets (case-insensitive), and `groups_correct` (0..4) keeps the partial credit.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

from legival_core.datasets.base import DatasetSpec, JudgeRubric, register_dataset
from legival_core.grading import (
    AnswerGrader,
    canonical_groups,
    connections_answers,
    groups_correct,
    parse_groups,
)
from legival_core.readers.records import field, read_jsonl
from legival_core.types import Grade, Problem

GRADER_VERSION = "connections-1"

# Legi-Val paper, appendix A.1 (ippolito-cmu/legible_cot_preprint, src/utils/prompts.py).
SYSTEM_PROMPT = """
You are an assistant configured to solve the New York Times Connections Word game. Make four groups of four words that share something in common. Categories will always be more specific than `5-LETTER-WORDS`, `NAMES` or `VERBS.`

Example 1:
Words: ['DART', 'HEM', 'PLEAT', 'SEAM', 'CAN', 'CURE', 'DRY', 'FREEZE', 'BITE', 'EDGE', 'PUNCH', 'SPICE', 'CONDO', 'HAW', 'HERO', 'LOO']
Answer:
```{
    "Groupings": {
        "1": {
            "Category": "Things to sew",
            "Words": [
                "DART",
                "HEM",
                "PLEAT",
                "SEAM"
            ]
        },
        "2": {
            "Category": "Ways to preserve food",
            "Words": [
                "CAN",
                "CURE",
                "DRY",
                "FREEZE"
            ]
        },
        "3": {
            "Category": "Sharp quality",
            "Words": [
                "BITE",
                "EDGE",
                "PUNCH",
                "SPICE"
            ]
        },
        "4": {
            "Category": "Birds minus last letter",
            "Words": [
                "CONDO",
                "HAW",
                "HERO",
                "LOO"
            ]
        }
    }
}```

Example 2:
Words: ['COLLECTIVE', 'COMMON', 'JOINT', 'MUTUAL', 'CLEAR', 'DRAIN', 'EMPTY', 'FLUSH', 'CIGARETTE', 'PENCIL', 'TICKET', 'TOE', 'AMERICAN', 'FEVER', 'LUCID', 'PIPE']
Answer:
```{
    "Groupings": {
        "1": {
            "Category": "Shared",
            "Words": [
                "COLLECTIVE",
                "COMMON",
                "JOINT",
                "MUTUAL"
            ]
        },
        "2": {
            "Category": "Rid of contents",
            "Words": [
                "CLEAR",
                "DRAIN",
                "EMPTY",
                "FLUSH"
            ]
        },
        "3": {
            "Category": "Associated with 'stub'",
            "Words": [
                "CIGARETTE",
                "PENCIL",
                "TICKET",
                "TOE"
            ]
        },
        "4": {
            "Category": "__ Dream",
            "Words": [
                "AMERICAN",
                "FEVER",
                "LUCID",
                "PIPE"
            ]
        }
    }
}```

Categories share commonalities:
- There will never be a miscellaneous category
- No word will ever appear in two categories
- There will always be four words in a category
- As the category number increases, the connections between the words and their category becomes more obscure. The category 1 is the most easy and intuitive, category 4 is the hardest
- There may be a red herring category
- Category 4 often contains words with a common preposition or postposition, like the category 4 in the example

Please reason step by step. Please respond in a JSON format."""


def format_question(words: list[str]) -> str:
    """The board as the paper's examples show it: `Words: ['A', 'B', ...]`, in the stored shuffled order."""
    return "Words: [" + ", ".join(f"'{w}'" for w in words) + "]"


def load_connections(path: Path) -> Iterator[Problem]:
    """`connections.jsonl` (id, date, groups[{level, group, members}], words_shuffled).

    problem_id = `connections-<id>`; the question lists `words_shuffled` (never the group order,
    which would give the answer away); gold = canonical JSON of the four groups.
    """
    path = Path(path)
    for _, rec in read_jsonl(path):
        line = rec["__line__"]
        pid = field(rec, "id", path)
        groups = field(rec, "groups", path, list)
        words = field(rec, "words_shuffled", path, list)
        members: list[list[str]] = []
        for k, g in enumerate(groups):
            if not isinstance(g, dict) or not isinstance(g.get("members"), list) or len(g["members"]) != 4:
                raise ValueError(f"{path}:{line}: field 'groups' item {k} needs 4 'members'")
            members.append([str(w) for w in g["members"]])
        if len(members) != 4:
            raise ValueError(f"{path}:{line}: field 'groups' has {len(members)} groups, expected 4")
        if sorted(w.upper() for w in words) != sorted(w.upper() for g in members for w in g):
            raise ValueError(f"{path}:{line}: field 'words_shuffled' does not hold the 16 group members")
        meta = (
            ("date", str(rec.get("date", ""))),
            ("categories", "|".join(str(g.get("group", "")) for g in groups)),
        )
        yield Problem(
            dataset="connections",
            problem_id=f"connections-{pid}",
            question=format_question([str(w) for w in words]),
            gold=canonical_groups(members),
            meta=meta,
        )


def judge(value: str, problem: Problem) -> Grade:
    n = groups_correct(parse_groups(value), parse_groups(problem.gold))
    return Grade(correct=n == 4, extracted=value, groups_correct=n)


# The backtracking judge's rubric for this dataset (SPEC section 3); provenance in
# legival_core/judges/prompt.py. Changing it changes judgements: bump judges.prompt.PROMPT_VERSION.
JUDGE_RUBRIC = JudgeRubric(
    task="""You are an expert in analyzing linguistic and lateral reasoning traces for the 'NYT Connections' word game. Your task is to identify 'backtracking' within these traces.

In Connections, backtracking occurs when the model suggests a group of four words under a specific theme, then realizes one or more words don't fit, or notices a 'red herring' and restarts its grouping strategy.

Your goal is to determine if the provided reasoning trace exhibits backtracking. Look for indicators such as:
- Explicit phrases (e.g., 'No, that word belongs elsewhere', 'Actually, these could be...', 'Wait, I already used that word', 'Let's try a different category').
- Abandoning a specific category theme (e.g., moving from 'Types of Dogs' to 'Units of Measurement' after realizing a word was a pun).
- Realizing that a word is a "red herring" intended to distract from the true category.
- Recalculating the remaining words after a failed grouping attempt.

Do not confuse the simple act of listing word definitions with backtracking. Backtracking requires an explicit "undoing" or "re-sorting" of a previously proposed group.""",
    final_answer="The final four categories and their respective words.",
    reason="Explain which word/category was abandoned and why.",
    rules="""**Filtering Rules:**
- `backtracking_detected`: `true` if the model revises its groupings or themes; `false` if it identifies all four categories correctly on the first pass.
- `backtracking_steps`: List the logical steps where a grouping was discarded or changed.""",
    overall_reasoning="A brief explanation of the model's categorical sorting process.",
)


SPEC = register_dataset(
    DatasetSpec(
        judge_rubric=JUDGE_RUBRIC,
        name="connections",
        task_patterns=("connections*", "nyt*connections*", "*/connections*"),
        grader=AnswerGrader(connections_answers, judge),
        loaders={"jsonl": load_connections},
        aliases=("nyt-connections", "nyt_connections"),
        system_prompt=SYSTEM_PROMPT,
        forcing_text="My final groupings are: ```",
        grader_version=GRADER_VERSION,
    )
)
