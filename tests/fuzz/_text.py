"""Text strategies for the fuzz tests: model output as it comes, answer-shaped fragments glued to any
character (lone surrogates included: the APIs take `str`, and a decoded JSON line can hold them), and
degenerate long inputs (a loop repeated up to ~150 KB, deeply nested boxes and brackets)."""

from __future__ import annotations

from hypothesis import strategies as st

FRAGMENTS = (
    "\\boxed{", "\\fbox{", "\\boxed {", "{", "}", "\\{", "\\}", "$", "$$", "\\(", "\\)", "\\[", "\\]",
    "####", "#### $", " ", "  ", "\n", "\n\n", "\t", "\r\n", ". ", "! ", "? ", "?!", "...",
    "The answer is ", "the correct answer is ", "The final answer is ", "Final answer: ", "Answer:",
    "answer is", "**Answer:** ", "**", "(", ")", "[", "]", ",", ":", "-", ".", "e", "E+", "=",
    "0", "1", "42", "-3.5", "1,000", "1{,}000", "1e308", "1e999999", "9" * 60, ".5",
    "\\frac{1}{2}", "\\frac12", "3/4", "\\sqrt2", "\\text{", "\\textbf{", "\\mbox{", "\\mathrm{", "\\dfrac",
    "^\\circ", "^{\\circ}", "\\text{ cm}^2", "\\text{degrees}", "%", "\\%", "\\$", "x = ", "\\pi", "\\left(",
    "A", "B", "C", "D", "E", "a", "(C)", "[B]", "option ", "choice ", "\\text{C}", "C) Paris",
    "```", "```json\n", '{"Groupings": ', '{"groups": ', '"Words": ', '"members": ', '"1": ', '"Category": "x", ',
    '["ALPHA", "BETA", "GAMMA", "DELTA"]', '[["A","B","C","D"],["E","F","G","H"],["I","J","K","L"],["M","N","O","P"]]',
    "Group 1: ", "ALPHA, BETA, GAMMA, DELTA", " (a note)", "- ", "1. ",
    "e.g. ", "i.e. ", "Mr. ", "U.S. ", "etc. ", "Wait. ", "Let me think. ", "Hmm, ", "So ",
    "\u00a0", "\u2028", "\u3000", "é", "İ", "ß", "ſ", "\u212a", "\ufeff", "\x00", "\x1c", "\ud800", "\udfff", "😀",
)
"""Pieces of answers and their syntax, and characters that break naive code (NUL, BOM, non-breaking
and ideographic spaces, a lone surrogate of each kind, characters whose case changes length)."""

ANY_CHAR = st.characters(codec=None, exclude_categories=())  # every code point, surrogates included

TEXT = st.lists(
    st.one_of(st.sampled_from(FRAGMENTS), st.text(alphabet=ANY_CHAR, max_size=4)), max_size=40
).map("".join)
"""Answer-shaped model output: fragments glued together with arbitrary characters in between."""

UNITS = ("Let me think. ", "?! x", "\\boxed{", "}", "{", "[", "]", " ", "\n", "(", "#### ", "answer: ",
         "The answer is 1. ", "\\text{", "e.g. ", "!", "a.) ", ". . ", "1,", "-")


def degenerate(max_chars: int) -> st.SearchStrategy[str]:
    """A repetition loop as a model emits it: a prefix, one unit repeated up to `max_chars`, a suffix;
    or `\\boxed{` / brackets nested thousands deep, closed or not."""
    unit = st.one_of(st.sampled_from(UNITS), TEXT.filter(bool))
    looped = st.builds(
        lambda pre, u, n, post: pre + (u * (max_chars // len(u) + 1))[: n] + post,
        TEXT, unit, st.integers(1, max_chars), TEXT,
    )
    nested = st.builds(
        lambda opener, depth, body, closers: opener * depth + body + "}]"[opener == "["] * min(depth, closers),
        st.sampled_from(("\\boxed{", "{", "[", "\\text{", '{"group": ', "\\fbox{\\boxed{")),
        st.integers(1, max_chars // 8), TEXT, st.integers(0, max_chars // 8),
    )
    return st.one_of(looped, nested)
