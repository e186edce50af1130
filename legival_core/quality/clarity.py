"""Linguistic clarity of a trace (gCoT paper, SPEC section 6): RD, SE, DC, SS_lite and CLX.

Definitions follow the authors' script `characterization/automatic/clarity/clarity-metrics.py` in the
public repository sanchezgt/md-eval-cot (commit d9bb4c77, cited below as [clarity]); the code here is
our own. Every function works on the text after `clean_text` (markdown emphasis, code ticks, bullets and
``$`` delimiters removed), as [clarity] defines it; the stored copy of its `main` is cut off before the
call, so applying it first is our reading of the script.

- FRE, Flesch Reading Ease ([clarity] `readability_fre`): ``206.835 - 1.015 W/S - 84.6 Y/W`` with
  S = sentences from a regex split on ``[.!?]`` + whitespace + capital/parenthesis, W = alphabetic
  words, Y = syllables from `count_syllables` (0 when S or W is 0).
- RD ([clarity] `normalize_and_score`): ``clip((FRE - p5) / (p95 - p5), 0, 1)`` with p5/p95 the
  linearly interpolated percentiles of FRE over a REFERENCE corpus; ``(FRE + 30) / 130`` when p95 == p5.
  The authors take percentiles over the scored file itself, so a score moves when traces are added;
  here the percentiles come from a stated, frozen `ClarityReference` recorded with every score.
- SE, step explicitness ([clarity] `step_structure`): ``clip(markers / S, 0, 1)``, markers = "Step n"
  line starts + bullet/numbered line starts + ordinal connectives (first ... finally, lastly).
- DC, definition coverage ([clarity] `definition_coverage`): share of symbols (tokens inside ``$..$``,
  single letters and ``x_i`` forms, all-caps words) that are introduced by let/denote/define/where or
  ``sym =``/``sym :=``; 1 when there is no symbol.
- SS_lite, syntactic simplicity (paper): complexity ``c = 0.5 W/S + 0.3 * 100 * commas/W + 0.2 *
  subordinators/S`` ([clarity] `syntactic_simplicity_lite`; commas = ``,`` and ``;``) mapped to
  ``SS_lite = 1 - clip((c - p5) / (p95 - p5), 0, 1)``: the paper's definition, the same p5..p95
  min-max scaling as RD (inverted: higher c = harder), so the simplest 5% of the reference score 1 and
  the hardest 5% score 0 (`ss_anchor="paper"`, the default). ``1 - min(1, c / 50)`` when p95 == p5.
  Dialect ``ss_anchor="script"``: [clarity] `normalize_and_score` anchors the numerator at p95,
  ``1 - clip((c - p95) / (p95 - p5), 0, 1)``, so every text at or below the reference p95 (95% of the
  corpus by construction) scores 1. The paper's Table 3 per-model means (0.52-0.66) are out of reach
  of that form (tests/core/quality/test_quality_clarity.py measures both on the shared traces).
- CLX = mean(RD, SE, DC, SS_lite) (SPEC section 6; [clarity] `aggregate_clx` instead weights seven
  components, including vagueness, units and terminology, which the paper's CLX does not use).
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable, Sequence
from dataclasses import asdict, dataclass
from typing import Any, Literal

CLARITY_VERSION = "clarity-2"
"""clarity-2: SS_lite anchored at p5 (the paper) by default; clarity-1 rows used the script's p95."""

SsAnchor = Literal["paper", "script"]
"""Where SS_lite's numerator is anchored: "paper" at p5, "script" at p95 ([clarity] as written)."""


def clean_text(text: str) -> str:
    """[clarity] `clean_text`: strip markdown emphasis, code ticks, bullets and ``$`` math delimiters."""
    t = re.sub(r"\*{1,2}(.*?)\*{1,2}", r"\1", text)
    t = re.sub(r"~{1,2}(.*?)~{1,2}", r"\1", t)
    t = re.sub(r"`(.*?)`", r"\1", t)
    t = re.sub(r"^\s*[-*•]\s+", "", t, flags=re.M)
    t = re.sub(r"\$\$([^$]+)\$\$", r"\1", t)
    t = re.sub(r"\$([^$]+)\$", r"\1", t)
    t = re.sub(r"([a-zA-Z0-9]+)\^\{?([a-zA-Z0-9]+)\}?", r"\1 to the power of \2", t)
    return t.strip()


def split_sentences(text: str) -> list[str]:
    """[clarity] `split_sentences`: a split after ``.!?`` followed by whitespace and a capital or ``(``."""
    text = text.strip()
    parts = [s.strip() for s in re.split(r"(?<=[.!?])\s+(?=[A-Z(])", text) if s and s.strip()]
    return parts or ([text] if text else [])


def words(text: str) -> list[str]:
    return re.findall(r"[A-Za-z]+(?:'[A-Za-z]+)?", text)


_VOWELS = "aeiouy"


def count_syllables(word: str) -> int:
    """[clarity] `count_syllables_en`: vowel groups, silent final e dropped, consonant+"le" counted,
    words of at most three letters are one syllable, never less than one."""
    w = re.sub(r"[^A-Za-z]", "", word.lower())
    if not w:
        return 0
    if len(w) <= 3:
        return 1
    consonant_le = len(w) > 2 and w.endswith("le") and w[-3] not in _VOWELS
    if w.endswith("e") and not consonant_le:
        w = w[:-1]
    count, prev = 0, False
    for ch in w:
        v = ch in _VOWELS
        count += v and not prev
        prev = v
    if len(w) > 2 and w.endswith("le") and w[-3] not in _VOWELS:
        count += 1
    return max(1, count)


def flesch_reading_ease(text: str) -> float:
    sents, ws = split_sentences(text), words(text)
    if not sents or not ws:
        return 0.0
    syll = sum(count_syllables(w) for w in ws)
    return 206.835 - 1.015 * (len(ws) / len(sents)) - 84.6 * (syll / len(ws))


_ORDINALS = re.compile(r"(?i)\b(?:first|second|third|fourth|fifth|next|then|finally|lastly)\b")


def step_explicitness(text: str) -> float:
    strong = len(re.findall(r"(?im)^\s*(?:step|paso)\s*\d+\b", text))
    bullets = len(re.findall(r"(?im)^\s*(?:[-*•]\s+|\d+[\.\)]\s+)", text))
    inline = len(_ORDINALS.findall(text))
    return min(1.0, (strong + bullets + inline) / max(1, len(split_sentences(text))))


def _symbols(text: str) -> set[str]:
    found: set[str] = set()
    for m in re.findall(r"\$([^$]+)\$", text):
        found.update(re.findall(r"[A-Za-z][A-Za-z0-9_]*", m))
    found.update(re.findall(r"\b[A-Za-z]_\w+\b|\b[A-Za-z]\b", text))
    found.update(re.findall(r"\b[A-Z]{2,}\b", text))
    return found


def _is_defined(symbol: str, text: str) -> bool:
    s = re.escape(symbol)
    pats = [rf"(?i)\b(?:let|denote|define|where)\s+{s}\b", rf"\b{s}\s*(?::=|=)"]
    return any(re.search(p, text) for p in pats)


def definition_coverage(text: str) -> float:
    syms = _symbols(text)
    if not syms:
        return 1.0
    return sum(_is_defined(s, text) for s in syms) / len(syms)


_SUBORDINATORS = frozenset(
    ["because", "although", "that", "if", "while", "since", "unless", "whereas", "though", "when", "whenever", "after", "before", "once", "until", "as"]
)


def syntactic_complexity(text: str) -> float:
    """The raw complexity c that SS_lite maps to [0, 1] (higher c = harder)."""
    ws = words(text)
    ns, nw = max(1, len(split_sentences(text))), max(1, len(ws))
    comma_rate = len(re.findall(r"[;,]", text)) / nw
    subs = sum(1 for w in ws if w.lower() in _SUBORDINATORS) / ns
    return 0.5 * (nw / ns) + 0.3 * comma_rate * 100 + 0.2 * subs


@dataclass(frozen=True, slots=True)
class ClarityRaw:
    fre: float
    se: float
    dc: float
    ss_complexity: float


def clarity_raw(text: str) -> ClarityRaw:
    t = clean_text(text)
    return ClarityRaw(flesch_reading_ease(t), step_explicitness(t), definition_coverage(t), syntactic_complexity(t))


def percentile(values: Sequence[float], p: float) -> float:
    """[clarity] `percentile_bounds`: linear interpolation between closest ranks (numpy 'linear')."""
    vs = sorted(values)
    k = (len(vs) - 1) * p
    f = int(k)
    c = min(len(vs) - 1, f + 1)
    return vs[f] if f == c else vs[f] * (c - k) + vs[c] * (k - f)


@dataclass(frozen=True, slots=True)
class ClarityReference:
    """p5/p95 of FRE and of the SS_lite complexity over a stated corpus, frozen for a benchmark run."""

    ref_id: str
    corpus: str
    n: int
    fre_p5: float
    fre_p95: float
    ss_p5: float
    ss_p95: float

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)

    def to_json(self) -> str:
        return json.dumps(self.as_dict(), sort_keys=True)

    @classmethod
    def from_json(cls, s: str) -> ClarityReference:
        return cls(**json.loads(s))


def build_reference(texts: Iterable[str], ref_id: str, corpus: str) -> ClarityReference:
    raws = [clarity_raw(t) for t in texts]
    if not raws:
        raise ValueError("a clarity reference needs at least one text")
    fre = [r.fre for r in raws]
    ss = [r.ss_complexity for r in raws]
    return ClarityReference(
        ref_id, corpus, len(raws),
        round(percentile(fre, 0.05), 6), round(percentile(fre, 0.95), 6),
        round(percentile(ss, 0.05), 6), round(percentile(ss, 0.95), 6),
    )


BUILTIN_REFERENCE = ClarityReference(
    ref_id="gsm8k-5teachers-v1",
    corpus="the 2,294 GSM8K traces of ../shared/data/reasoning_traces/gsm8k/*.jsonl (DeepSeek-R1-Distill "
    "Llama-8B, Qwen-1.5B, Qwen-14B, Qwen-32B, gpt-oss-120b); rebuild with benchmarks/quality.py --reference",
    n=2294,
    fre_p5=46.252051,
    fre_p95=95.032402,
    ss_p5=1.833333,
    ss_p95=12.033262,
)
"""The default reference (fixed: scores never move when traces are added to a store)."""


@dataclass(frozen=True, slots=True)
class ClarityScores:
    rd: float
    se: float
    dc: float
    ss_lite: float
    clx: float
    raw: ClarityRaw


def _clip(x: float) -> float:
    return max(0.0, min(1.0, x))


def ss_lite(complexity: float, ref: ClarityReference, ss_anchor: SsAnchor = "paper") -> float:
    """SS_lite of a raw complexity against `ref` (module doc: the paper's form and the script's)."""
    if ss_anchor not in ("paper", "script"):
        raise ValueError(f"ss_anchor must be 'paper' or 'script', not {ss_anchor!r}")
    if ref.ss_p95 <= ref.ss_p5:
        return 1.0 - min(1.0, complexity / 50.0)
    anchor = ref.ss_p5 if ss_anchor == "paper" else ref.ss_p95
    return 1.0 - _clip((complexity - anchor) / (ref.ss_p95 - ref.ss_p5))


def clarity_scores(raw: ClarityRaw, ref: ClarityReference, ss_anchor: SsAnchor = "paper") -> ClarityScores:
    if ref.fre_p95 > ref.fre_p5:
        rd = _clip((raw.fre - ref.fre_p5) / (ref.fre_p95 - ref.fre_p5))
    else:
        rd = _clip((raw.fre + 30.0) / 130.0)
    ss = ss_lite(raw.ss_complexity, ref, ss_anchor)
    se, dc = _clip(raw.se), _clip(raw.dc)
    return ClarityScores(rd, se, dc, ss, (rd + se + dc + ss) / 4.0, raw)


def clarity(text: str, ref: ClarityReference = BUILTIN_REFERENCE, ss_anchor: SsAnchor = "paper") -> ClarityScores:
    return clarity_scores(clarity_raw(text), ref, ss_anchor)
