"""What a training loop hands the reward, checked once (legival_core/rl/items.py, http.py): each bad
item is its own error naming the field, a bad request one 400-worthy refusal, never a traceback."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from legival_core.rl.http import MAX_ITEMS, RequestRefused, openrlhf_answer, parse_native, parse_openrlhf
from legival_core.rl.items import Item, ItemError, gold_of, items_from_lists, question_of, response_of
from legival_core.rl.score import Part, Scored

LIMIT = 1000


def test_questions_come_from_chat_messages_templates_or_plain_text() -> None:
    assert question_of([{"role": "system", "content": "be brief"}, {"role": "user", "content": "2+3?"}]) == "2+3?"
    assert question_of("<|im_start|>system\nx<|im_end|>\n<|im_start|>user\nWhat is 2+3?<|im_end|>\n"
                       "<|im_start|>assistant\n") == "What is 2+3?"
    assert question_of("<|start_header_id|>user<|end_header_id|>\n\nHow many?<|eot_id|>") == "How many?"
    assert question_of("plain question") == "plain question"
    with pytest.raises(ItemError, match="prompt: chat messages without a user message"):
        question_of([{"role": "system", "content": "x"}])


def test_openrlhf_queries_are_prompt_then_response() -> None:
    prompt = "<|im_start|>user\nQ<|im_end|>\n<|im_start|>assistant\n"
    assert response_of(prompt + "It is 5.<|im_end|>", prompt) == "It is 5."
    assert response_of("unrelated text", prompt) == "unrelated text"


@pytest.mark.parametrize(("value", "says"), [(None, "got null"), (True, "got true/false"), ([1], "expected text"),
                                             ("  ", "empty"), (float("nan"), "NaN")])
def test_a_gold_that_is_no_gold_is_refused(value: Any, says: str) -> None:
    with pytest.raises(ItemError, match=says):
        gold_of(value)


def test_numbers_are_golds() -> None:
    assert (gold_of(72), gold_of(72.0), gold_of(" 7.5 ")) == ("72", "72", "7.5")


def test_one_bad_item_never_fails_its_batch() -> None:
    got = parse_native({"items": [
        {"prompt": "q", "completion": "c", "gold": "1"},
        {"prompt": "q", "completion": 5, "gold": "1"},
        {"prompt": "q", "completion": "x" * (LIMIT + 1), "gold": "1"},
        {"prompt": "q", "completion": "c"},
        {"completion": "c", "gold": "1"},
        "not an object",
        {"prompt": "q", "completion": "c", "gold": "1", "step": -1},
        {"prompt": "q", "completion": "nul\x00", "gold": "1"},
    ]}, LIMIT)
    assert isinstance(got[0], Item) and got[0].question == "q"
    errors = [str(e) for e in got[1:]]
    assert all(isinstance(e, ItemError) for e in got[1:])
    assert errors == ["items[1].completion: expected text, got int",
                      f"items[2].completion: {LIMIT + 1:,} characters, over the limit of {LIMIT:,}",
                      "items[3].gold: missing", "items[4].prompt: missing", "items[5]: expected an object, got str",
                      "items[6].step: expected a training step (a whole number >= 0), got int",
                      "items[7].completion: holds a NUL character"]


@pytest.mark.parametrize(("body", "says"), [
    ([], "expected a JSON object"), ({"items": 3}, "field 'items'"),
    ({"items": [{}] * (MAX_ITEMS + 1)}, "over the limit"),
])
def test_a_request_that_is_none_is_refused(body: Any, says: str) -> None:
    with pytest.raises(RequestRefused, match=says):
        parse_native(body, LIMIT)


@pytest.mark.parametrize(("body", "says"), [
    ({"query": ["a"], "prompts": ["a"]}, "field 'labels'"),
    ({"query": ["a", "b"], "prompts": ["a"], "labels": ["1"]}, "as long as each other"),
    ("x", "expected a JSON object"),
])
def test_openrlhf_shapes_are_checked(body: Any, says: str) -> None:
    with pytest.raises(RequestRefused, match=says):
        parse_openrlhf(body, LIMIT)


def test_openrlhf_labels_may_carry_the_question_and_answers_are_numbers_only() -> None:
    items = parse_openrlhf({"query": ["P: It is 5.", "P: x"], "prompts": ["P: ", "P: "],
                            "labels": [{"gold": 5, "question": "2+3?"}, None]}, LIMIT)
    assert isinstance(items[0], Item) and (items[0].question, items[0].completion, items[0].gold) == ("2+3?", "It is 5.", "5")
    assert isinstance(items[1], ItemError) and "labels[1]" in str(items[1])
    answer = openrlhf_answer([Scored("k", 1.5, {"correct": Part(1.0)}, True, Part(0.5)), Scored(None, None, error="x")])
    assert answer["rewards"] == [1.5, 0.0] and answer["scores"] == answer["rewards"]
    assert answer["extra_logs"]["legival_refused"] == [0.0, 1.0] and answer["extra_logs"]["legival_watch"] == [0.5, 0.0]
    assert all(isinstance(v, float) for vs in answer["extra_logs"].values() for v in vs)


def test_trl_lists_become_items_each_checked_alone() -> None:
    got = items_from_lists(["q1", [{"role": "user", "content": "q2"}]], ["c1", [{"role": "assistant", "content": "c2"}]],
                           ["1", None], source="trl", limit=LIMIT, step=4, groups=["u0", "u0"])
    assert isinstance(got[0], Item) and got[0].step == 4 and got[0].group == "u0"
    assert isinstance(got[1], ItemError) and str(got[1]).startswith("gold[1]")


@settings(max_examples=200, deadline=None)
@given(st.recursive(st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=20),
                    lambda c: st.lists(c, max_size=4) | st.dictionaries(st.text(max_size=8), c, max_size=4),
                    max_leaves=20))
def test_any_json_value_is_an_answer_or_a_refusal_never_a_crash(body: Any) -> None:
    for parse in (lambda b: parse_native(b, LIMIT), lambda b: parse_openrlhf(b, LIMIT)):
        try:
            got = parse(body)
        except RequestRefused:
            continue
        assert all(isinstance(x, Item | ItemError) for x in got)


def test_the_example_reward_spec_validates_and_a_bad_one_says_what_to_fix(tmp_path: Any) -> None:
    from legival_core.run_config import SpecError
    from legival_core.run_config.reward import load_reward_spec, parse_reward_spec
    from tests.conftest import REPO

    spec = load_reward_spec(REPO / "examples" / "reward.yaml")
    assert set(spec.components.weighed()) == {"correct", "transfer", "length"} and spec.watch is not None
    for data, says in (({"components": {"correct": None}}, "at least one component"),
                       ({"dataset": "nope"}, "dataset"),
                       ({"components": {"correct": {"weight": 1}}, "watch": {}}, "reads the transfer"),
                       ({"components": {"transfer": {"student": {"name": "a"}}}, "watch": {"student": {"name": "a"}}},
                        "must be another student"),
                       ({"components": {"length": {"unit": "words"}}}, "components.length.unit"),
                       ({"component": {}}, "unknown key")):
        with pytest.raises(SpecError, match=says):
            parse_reward_spec(data)


def test_two_equal_openrlhf_samples_of_one_call_are_two_log_entries() -> None:
    """`Item.ordinal`: equal completions of one call are two samples (as TRL's and the native items are)."""
    items = parse_openrlhf({"query": ["P: It is 5.", "P: It is 5."], "prompts": ["P: ", "P: "],
                            "labels": ["5", "5"]}, LIMIT)
    assert all(isinstance(i, Item) for i in items)
    assert len({i.key for i in items if isinstance(i, Item)}) == 2
