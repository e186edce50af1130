"""Logical-factual consistency: NLI question-to-step and intra-trace scores; AlignScore, FactCC adapters.

Definitions from `characterization/automatic/consistency/` in sanchezgt/md-eval-cot (commit d9bb4c77):

- [nli] `nli_consistency.py`: question and trace are normalised (`normalize_math_md`: ``$..$`` -> EQ,
  code -> CODE, ``\\times``/``\\cdot``/``\\div``, ``\\frac``, markdown marks dropped), the trace split
  on ``[.!?]`` + whitespace + capital. With p_con(premise, hypothesis) the contradiction probability
  (softmax; labels read from the model's id2label: entail/support, contrad/refut, neutral/unknown/nei,
  renormalised over the three):
  ``nli_q2s_max = 1 - max_j p_con(q, s_j)``, ``nli_q2s_mean = 1 - mean_j p_con(q, s_j)``,
  ``nli_intra = mean_{j>=2} (1 - max_{j-k <= i < j} p_con(s_i, s_j))`` with window k = 3; each is 1
  for a trace without (enough) sentences. Default model MoritzLaurer/DeBERTa-v3-large-mnli-fever-anli-ling-wanli.
- [align] `consistency-AlignScore.py`: AlignScore in both directions is `quality.alignscore`; the
  script's NLI fallback for S_support, ``(mean_j (p_ent - p_con)(q, s_j) + 1) / 2``, is stored under its
  own name, `nli_support`, with the NLI model as method, never as AlignScore.
- [factcc] `factcc.py`: P(factual) of (trace, final response) under manueldeprada/FactCC.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from legival_core.quality._local import Unavailable, has_module, local_model_dir, missing_model
from legival_core.quality.informativeness import normalize_math_md as normalize_math_eq

if TYPE_CHECKING:
    import numpy as np

NLI_VERSION = "nli-1"
FACTCC_VERSION = "factcc-2"
"""factcc-2: the response normalised as [factcc] does (`EQ(..)`), texts stripped; factcc-1 used [nli]'s normaliser."""
DEFAULT_NLI_MODEL = "MoritzLaurer/DeBERTa-v3-large-mnli-fever-anli-ling-wanli"
DEFAULT_FACTCC_MODEL = "manueldeprada/FactCC"
NLI_WINDOW = 3

Pair = tuple[str, str | None]


def normalize_math_md(t: str) -> str:
    if not t:
        return ""
    t = re.sub(r"\$\$.*?\$\$|\$.*?\$", " EQ ", t, flags=re.S)
    t = re.sub(r"```.*?```", " CODE ", t, flags=re.S)
    t = t.replace("\\times", "*").replace("\\cdot", "*").replace("\\div", "/")
    t = re.sub(r"\\frac{([^{}]+)}{([^{}]+)}", r"(\1/\2)", t)
    t = re.sub(r"[*_#`>]+", " ", t)
    return re.sub(r"\s+", " ", t).strip()


def split_sentences(t: str) -> list[str]:
    if not t:
        return []
    sents = [s.strip() for s in re.split(r"(?<=[.!?])\s+(?=[A-ZÁÉÍÓÚÑ])", t.strip()) if s.strip()]
    return sents or [t.strip()]


# ------------------------------------------------------------------ the scoring logic (pure)

ProbsFn = Callable[[Sequence[tuple[str, str]]], "np.ndarray"]
"""(premise, hypothesis) pairs -> array (n, 3) of [p_entail, p_contradiction, p_neutral]."""


@dataclass(frozen=True, slots=True)
class NLIConsistency:
    q2s_max: float
    q2s_mean: float
    intra: float
    support: float
    n_sentences: int


def nli_consistency(question: str, trace: str, probs: ProbsFn, window: int = NLI_WINDOW) -> NLIConsistency:
    q = normalize_math_md(question)
    sents = split_sentences(normalize_math_md(trace))
    if not sents:
        return NLIConsistency(1.0, 1.0, 1.0, 0.5, 0)
    qp = probs([(q, s) for s in sents])
    p_con = [float(x) for x in qp[:, 1]]
    support = (float((qp[:, 0] - qp[:, 1]).mean()) + 1.0) / 2.0
    intra_vals: list[float] = []
    if len(sents) > 1:
        pairs = [(sents[i], sents[j]) for j in range(1, len(sents)) for i in range(max(0, j - window), j)]
        pc = probs(pairs)[:, 1]
        pos = 0
        for j in range(1, len(sents)):
            w = j - max(0, j - window)
            intra_vals.append(1.0 - float(pc[pos : pos + w].max()))
            pos += w
    intra = sum(intra_vals) / len(intra_vals) if intra_vals else 1.0
    return NLIConsistency(1.0 - max(p_con), 1.0 - sum(p_con) / len(p_con), intra, support, len(sents))


# ------------------------------------------------------------------ models


def _label_kind(label: str) -> str | None:
    s = label.strip().lower()
    if "entail" in s or "support" in s:
        return "entail"
    if "contrad" in s or "refut" in s:
        return "contra"
    if "neutral" in s or "unknown" in s or "not enough info" in s or s == "nei":
        return "neutral"
    return None


@dataclass
class Classifier:
    """A transformers sequence-classification model on CPU, batched, truncating pairs to max_length."""

    model_id: str
    tokenizer: Any
    model: Any
    max_length: int = 512
    batch_size: int = 16

    def logits(self, pairs: Sequence[Pair]) -> np.ndarray:
        import numpy as np
        import torch

        out: list[np.ndarray] = []
        for a in range(0, len(pairs), self.batch_size):
            chunk = pairs[a : a + self.batch_size]
            firsts = [p[0] for p in chunk]
            seconds = [p[1] for p in chunk]
            kw: dict[str, Any] = {"truncation": True, "max_length": self.max_length, "padding": True,
                                  "return_tensors": "pt"}
            enc = self.tokenizer(firsts, **kw) if all(s is None for s in seconds) else self.tokenizer(
                firsts, [s or "" for s in seconds], **kw)
            with torch.inference_mode():
                out.append(self.model(**enc).logits.float().numpy())
        n_labels = int(self.model.config.num_labels)
        return np.concatenate(out) if out else np.zeros((0, n_labels), dtype=np.float32)

    def softmax(self, pairs: Sequence[Pair]) -> np.ndarray:
        import numpy as np

        z = self.logits(pairs)
        z = np.exp(z - z.max(axis=1, keepdims=True))
        return np.asarray(z / z.sum(axis=1, keepdims=True))


def load_classifier(model: str, max_length: int = 512) -> Classifier | Unavailable:
    if not has_module("transformers") or not has_module("torch"):
        return Unavailable(model, "pip install transformers torch")
    path = local_model_dir(model)
    if path is None:
        return missing_model(model, "download it on a connected machine and pass its directory")
    from transformers import AutoModelForSequenceClassification, AutoTokenizer

    tok = AutoTokenizer.from_pretrained(str(path))
    mdl = AutoModelForSequenceClassification.from_pretrained(str(path))
    mdl.eval()
    limits = [max_length, getattr(mdl.config, "max_position_embeddings", None), getattr(tok, "model_max_length", None)]
    return Classifier(model, tok, mdl, min(x for x in limits if isinstance(x, int) and 0 < x < 1_000_000))


@dataclass
class NLIModel:
    clf: Classifier
    order: tuple[int, int, int]
    """Column indices of entailment, contradiction and neutral in the model's output."""

    def probs(self, pairs: Sequence[tuple[str, str]]) -> np.ndarray:
        import numpy as np

        p = self.clf.softmax(list(pairs))[:, list(self.order)]
        s = p.sum(axis=1, keepdims=True)
        return np.asarray(np.where(s > 0, p / np.where(s > 0, s, 1.0), p))


def load_nli(model: str = DEFAULT_NLI_MODEL, max_length: int = 512) -> NLIModel | Unavailable:
    clf = load_classifier(model, max_length)
    if isinstance(clf, Unavailable):
        return clf
    id2label = {int(k): str(v) for k, v in clf.model.config.id2label.items()}
    idx = {kind: i for i, lbl in id2label.items() if (kind := _label_kind(lbl))}
    if set(idx) != {"entail", "contra", "neutral"}:
        return Unavailable(model, f"not a 3-way NLI model: id2label={id2label} needs entailment, "
                                  "contradiction and neutral labels")
    return NLIModel(clf, (idx["entail"], idx["contra"], idx["neutral"]))


_FACTUAL = {"factual", "correct", "entail", "entailment", "supported", "true", "yes"}
_NONFACT = {"incorrect", "nonfactual", "contradiction", "refuted", "unsupported", "false", "no"}


def load_factcc(model: str = DEFAULT_FACTCC_MODEL) -> Callable[[str, str], float] | Unavailable:
    """[factcc]: P(factual) renormalised over the factual/non-factual labels."""
    clf = load_classifier(model)
    if isinstance(clf, Unavailable):
        return clf
    labels = {int(k): re.sub(r"[\s\-]+", "", str(v).lower()) for k, v in clf.model.config.id2label.items()}
    fact = [i for i, lbl in labels.items() if lbl in _FACTUAL]
    non = [i for i, lbl in labels.items() if lbl in _NONFACT]
    if not fact or not non:
        return Unavailable(model, f"cannot tell the factual label from id2label={labels}")

    def score(trace: str, response: str) -> float:
        # [factcc]: both texts stripped, the response through the EQ(..) normaliser of [info] (not the
        # "EQ" one of [nli])
        p = clf.softmax([(str(trace or "").strip(), normalize_math_eq(str(response or "").strip()))])[0]
        pf, pn = float(p[fact].max()), float(p[non].max())
        return pf / (pf + pn) if pf + pn > 0 else 0.0

    return score
