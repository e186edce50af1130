"""Coverage/informativeness: BERTScore and BLEURT adapters (gCoT paper).

From `characterization/automatic/informativeness/informativeness.py` in sanchezgt/md-eval-cot (commit
d9bb4c77): candidate = the final answer text, reference = the trace, both through `normalize_math_md`
(``$..$`` kept as ``EQ(..)``); S_info_bert = BERTScore F1 (microsoft/deberta-xlarge-mnli, English,
rescaled with the baseline), S_info_bleurt = BLEURT-20. Both report `Unavailable` unless the package
and the model are on this machine; nothing is downloaded.
"""

from __future__ import annotations

import re
from collections.abc import Callable

from legival_core.quality._local import Unavailable, has_module, local_model_dir, missing_model

BERTSCORE_VERSION = "bertscore-1"
BLEURT_VERSION = "bleurt-1"
DEFAULT_BERTSCORE_MODEL = "microsoft/deberta-xlarge-mnli"
DEFAULT_BLEURT_CKPT = "BLEURT-20"


def normalize_math_md(t: str) -> str:
    t = str(t or "")
    t = re.sub(r"\$\$.*?\$\$|\$.*?\$", lambda m: " EQ(" + re.sub(r"\s+", " ", m.group(0).strip("$")) + ") ", t,
               flags=re.S)
    t = re.sub(r"\\\(|\\\)|\\\[|\\\]", " ", t)
    t = re.sub(r"```.*?```", " CODE ", t, flags=re.S)
    t = t.replace("\\times", "*").replace("\\cdot", "*").replace("\\div", "/").replace("\\sqrt", "sqrt")
    t = re.sub(r"\\frac{([^{}]+)}{([^{}]+)}", r"(\1/\2)", t)
    t = t.replace("≤", "<=").replace("≥", ">=").replace("–", "-").replace("—", "-")
    t = re.sub(r"(?<=\d),(?=\d{3}\b)", "", t)
    return re.sub(r"\s+", " ", t).strip()


Scorer = Callable[[list[str], list[str]], list[float]]
"""(candidates, references) -> one score per pair."""


def load_bertscore(model: str = DEFAULT_BERTSCORE_MODEL) -> Scorer | Unavailable:
    if not has_module("bert_score"):
        return Unavailable(model, "pip install bert-score")
    path = local_model_dir(model)
    if path is None:
        return missing_model(model, "download it on a connected machine and pass its directory")
    from bert_score import BERTScorer

    scorer = BERTScorer(model_type=str(path), num_layers=40, lang="en", rescale_with_baseline=False, device="cpu")

    def score(cands: list[str], refs: list[str]) -> list[float]:
        _, _, f1 = scorer.score([normalize_math_md(c) for c in cands], [normalize_math_md(r) for r in refs])
        return [float(x) for x in f1.tolist()]

    return score


def load_bleurt(ckpt: str = DEFAULT_BLEURT_CKPT) -> Scorer | Unavailable:
    if not has_module("evaluate") or not has_module("bleurt"):
        return Unavailable(ckpt, "pip install evaluate tensorflow git+https://github.com/google-research/bleurt "
                                 "and pass a local BLEURT-20 checkpoint directory")
    if local_model_dir(ckpt) is None:
        return Unavailable(ckpt, f"BLEURT checkpoint {ckpt!r} is not a local directory")
    import evaluate

    metric = evaluate.load("bleurt", checkpoint=ckpt)

    def score(cands: list[str], refs: list[str]) -> list[float]:
        out = metric.compute(predictions=[normalize_math_md(c) for c in cands],
                             references=[normalize_math_md(r) for r in refs])
        return [float(x) for x in out["scores"]]

    return score
