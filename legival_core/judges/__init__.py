"""Backtracking judges (SPEC section 3): the shared loop (`base`), the judges (`gemini` on google-genai,
`openai_compat` on `legival_core.llm`'s transport), the `lexical` fallback, the factory that builds a
judge by its registered name (`factory.make_judge`), cost estimates (`cost`, priced by `llm.cost`) and
human agreement. Prices, retries, rate limits, the circuit breaker and the error classes are
`legival_core.llm`'s.

Judges register themselves in their own modules, found by the registry's scan of this package; this
package imports none of them eagerly (`GeminiJudge` and `OpenAICompatJudge` resolve on first use), and
google-genai is imported only when a Gemini judge is constructed.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

from legival_core.judges.agreement import (
    AgreementReport,
    HumanAnnotation,
    agreement,
    load_human_annotations,
)
from legival_core.judges.base import BaseJudge, JudgeLimits
from legival_core.judges.cost import estimate_cost, guard_cost
from legival_core.judges.factory import JudgeInfo, judge_info, make_judge
from legival_core.judges.prompt import PROMPT_VERSION
from legival_core.judges.records import (
    BatchJudge,
    Judge,
    JudgeError,
    JudgeRequest,
    JudgeResult,
    MissingAPIKey,
    backtracking_fraction,
)
from legival_core.judges.windows import WindowPolicy

if TYPE_CHECKING:
    from legival_core.judges.gemini import GeminiJudge
    from legival_core.judges.openai_compat import OpenAICompatJudge

_LAZY = {"GeminiJudge": "legival_core.judges.gemini", "OpenAICompatJudge": "legival_core.judges.openai_compat"}


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        return getattr(importlib.import_module(_LAZY[name]), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


__all__ = [
    "PROMPT_VERSION",
    "AgreementReport",
    "BaseJudge",
    "BatchJudge",
    "GeminiJudge",
    "HumanAnnotation",
    "Judge",
    "JudgeError",
    "JudgeInfo",
    "JudgeLimits",
    "JudgeRequest",
    "JudgeResult",
    "MissingAPIKey",
    "OpenAICompatJudge",
    "WindowPolicy",
    "agreement",
    "backtracking_fraction",
    "estimate_cost",
    "guard_cost",
    "judge_info",
    "load_human_annotations",
    "make_judge",
]
