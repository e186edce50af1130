"""LLM judges for the backtracking metric (SPEC section 3).

Importing this package registers `gemini` and `openai-compatible` in the judge registry; google-genai
is imported only when a Gemini judge is constructed.
"""

from legival_core.judges.agreement import (
    AgreementReport,
    HumanAnnotation,
    agreement,
    cohen_kappa,
    load_human_annotations,
)
from legival_core.judges.base import (
    BaseJudge,
    Judge,
    JudgeError,
    JudgeLimits,
    JudgeRequest,
    JudgeResult,
    MissingAPIKey,
    WindowPolicy,
    backtracking_fraction,
)
from legival_core.judges.cost import CostEstimate, CostLimitExceeded, Prices, estimate_cost, guard_cost
from legival_core.judges.gemini import GeminiJudge
from legival_core.judges.openai_compat import OpenAICompatJudge
from legival_core.judges.prompt import PROMPT_VERSION

__all__ = [
    "PROMPT_VERSION",
    "AgreementReport",
    "BaseJudge",
    "CostEstimate",
    "CostLimitExceeded",
    "GeminiJudge",
    "HumanAnnotation",
    "Judge",
    "JudgeError",
    "JudgeLimits",
    "JudgeRequest",
    "JudgeResult",
    "MissingAPIKey",
    "OpenAICompatJudge",
    "Prices",
    "WindowPolicy",
    "agreement",
    "backtracking_fraction",
    "cohen_kappa",
    "estimate_cost",
    "guard_cost",
    "load_human_annotations",
]
