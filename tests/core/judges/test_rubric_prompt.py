"""Every dataset's rubric asks for the reply the one parser reads (`judges.prompt.rubric_prompt`,
`judges.reply.parse_judgement`): the format is written once, so no rubric can drift from the parser."""

from __future__ import annotations

import json
import re

import pytest

from legival_core.judges.prompt import RESPONSE_JSON_SCHEMA, has_rubric, system_prompt
from legival_core.judges.reply import ReplyInvalid, parse_judgement
from legival_core.registry import names

REPLY = {"backtracking_detected": True, "final_answer": "4", "backtracking_steps": [{"step_number": 2, "reason": "r"}],
         "confidence": 0.9, "overall_reasoning": "o"}


def test_every_rubric_asks_for_the_keys_the_parser_reads() -> None:
    keys = set(REPLY) | {"step_number", "reason"}
    assert set(REPLY) == set(RESPONSE_JSON_SCHEMA["required"])
    rubrics = [d for d in names("dataset") if has_rubric(d)]
    assert len(rubrics) >= 5
    for d in rubrics:
        text = system_prompt(d)
        structure = text[text.index("following structure:\n{"):text.index("\n}\n")]
        assert set(re.findall(r'^ *"(\w+)":', structure, re.M)) == keys, d
        assert text.endswith(".\n") and "- Your response MUST be a single, valid JSON object." in text, d
    assert parse_judgement(json.dumps(REPLY), 1, 3).steps == (2,)
    for k in RESPONSE_JSON_SCHEMA["required"]:
        with pytest.raises(ReplyInvalid, match=k):
            parse_judgement(json.dumps({x: v for x, v in REPLY.items() if x != k}), 1, 3)
