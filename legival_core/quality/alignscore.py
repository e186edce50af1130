"""AlignScore in both directions (gCoT paper, logical-factual consistency): S_support and S_imp.

From `characterization/automatic/consistency/consistency-AlignScore.py` in sanchezgt/md-eval-cot (commit
d9bb4c77, cited as [align]), backend "alignscore" (AlignScore-large checkpoint, roberta-large backbone,
evaluation mode 'nli_sp'):

- ``S_support = AlignScore(context = question, claim = trace)``: the question supports the trace;
- ``S_imp = AlignScore(context = trace, claim = response)``: the trace implies the final response (what
  the model wrote after its thinking section); the paper's Table 1 metric. Undefined (None) without a
  response, as in [align].

The question is used as given; trace and response go through [align]'s `normalize_math_md` (the same
function as `informativeness.normalize_math_md`: ``$..$`` kept as ``EQ(..)``, LaTeX operators spelled).

AlignScore 'nli_sp' (Zha et al., ACL 2023; package `alignscore`, `Inferencer.inference_per_example`):
the context is split into sentences (NLTK English Punkt) and grouped into chunks of
``k = max(len(sentences) // (words(context) // 350 + 1), 1)`` consecutive sentences joined by a space;
the claim is split into sentences s_j (none: no score); each (chunk, s_j) pair is one sequence pair for
the model, truncating the chunk only (the whole pair when the claim alone is too long), at most the
tokenizer's `model_max_length` tokens; ``p(c, s) = softmax(tri_layer(pooler_output))[0]``, the
"aligned" class of the 3-way head, and ``AlignScore = mean_j max_c p(c, s_j)``.

Implemented on transformers directly: the `alignscore` package imports pytorch-lightning and loads
spaCy's en_core_web_sm in its constructor, neither of which this project carries. Its checkpoint's
state dict (`base_model.*`, the backbone; `tri_layer.*`, the 3-way head) is loaded into the backbone's
architecture (config and tokenizer from `backbone`, a local directory or a Hugging Face cache entry).
Deviation: a batch is padded to its longest pair, not to 512 tokens (the same outputs under the
attention mask, to float rounding).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from typing import Any

from legival_core.quality._local import Unavailable, has_module, local_model_dir, missing_model
from legival_core.quality.informativeness import normalize_math_md

ALIGNSCORE_VERSION = "alignscore-2"
"""alignscore-2: both directions (support, imp), [align]'s normalisation; native 'nli_sp' inference."""
DEFAULT_ALIGNSCORE_CKPT = "AlignScore-large.ckpt"
DEFAULT_ALIGNSCORE_BACKBONE = "roberta-large"
CHUNK_WORDS = 350

AlignedFn = Callable[[Sequence[tuple[str, str]]], Sequence[float]]
"""(context chunk, claim sentence) pairs -> P(aligned) of each pair."""


@lru_cache(maxsize=1)
def _punkt():  # type: ignore[no-untyped-def]
    """NLTK's English Punkt as `nltk.sent_tokenize` builds it (from the bundled parameters, no download)."""
    from collections import defaultdict

    from nltk.tokenize.punkt import PunktParameters, PunktSentenceTokenizer
    from punkt.data import english

    params = PunktParameters()
    params.abbrev_types = set(english.ABBREV_TYPES)
    params.collocations = set(english.COLLOCATIONS)
    params.sent_starters = set(english.SENT_STARTERS)
    params.ortho_context = defaultdict(int, english.ORTHO_CONTEXT)
    return PunktSentenceTokenizer(params)


def sentences(text: str) -> list[str]:
    return [str(s) for s in _punkt().tokenize(text)]


def context_chunks(context: str) -> list[str]:
    """The context's sentences grouped into chunks of about `CHUNK_WORDS` words ([AlignScore] `chunks`)."""
    sents = sentences(context) or [""]
    n_chunks = len(context.strip().split()) // CHUNK_WORDS + 1
    k = max(len(sents) // n_chunks, 1)
    return [" ".join(sents[i : i + k]) for i in range(0, len(sents), k)]


def nli_sp(context: str, claim: str, aligned: AlignedFn) -> float | None:
    """AlignScore 'nli_sp' of `claim` given `context`: mean over claim sentences of the max over
    context chunks of P(aligned); None when the claim has no sentence."""
    chunks, claims = context_chunks(context), sentences(claim)
    if not claims:
        return None
    p = list(aligned([(c, s) for c in chunks for s in claims]))  # chunk-major, as [AlignScore]
    n = len(claims)
    return sum(max(p[i * n + j] for i in range(len(chunks))) for j in range(n)) / n


@dataclass(frozen=True, slots=True)
class AlignScores:
    support: float | None
    imp: float | None


def align_both(question: str, trace: str, response: str, score: Callable[[str, str], float | None]) -> AlignScores:
    """[align]: S_support = score(question, trace), S_imp = score(trace, response) (None without one)."""
    b, r = normalize_math_md(trace), normalize_math_md(response)
    return AlignScores(score(question.strip(), b) if b else None, score(b, r) if b and r else None)


@dataclass
class AlignScorer:
    """An AlignScore checkpoint on CPU: the backbone, its pooler and the 3-way head."""

    tokenizer: Any
    model: Any
    head: Any
    max_length: int
    batch_size: int = 8

    def aligned(self, pairs: Sequence[tuple[str, str]]) -> list[float]:
        import torch

        out: list[float] = []
        for a in range(0, len(pairs), self.batch_size):
            chunk = pairs[a : a + self.batch_size]
            firsts, seconds = [p[0] for p in chunk], [p[1] for p in chunk]
            kw: dict[str, Any] = {"padding": True, "max_length": self.max_length, "return_tensors": "pt"}
            try:
                enc = self.tokenizer(firsts, seconds, truncation="only_first", **kw)
            except Exception:  # noqa: BLE001 - [AlignScore]: a claim longer than the limit truncates both
                enc = self.tokenizer(firsts, seconds, truncation=True, **kw)
            with torch.inference_mode():
                pooled = self.model(**enc).pooler_output
                out += torch.softmax(self.head(pooled).float(), dim=-1)[:, 0].tolist()
        return out

    def score(self, context: str, claim: str) -> float | None:
        return nli_sp(context, claim, self.aligned)


def load_alignscore(ckpt: str = DEFAULT_ALIGNSCORE_CKPT, backbone: str = DEFAULT_ALIGNSCORE_BACKBONE,
                    batch_size: int = 8) -> AlignScorer | Unavailable:
    """The checkpoint `ckpt` (a Lightning .ckpt with `state_dict`, or a plain state dict) on `backbone`'s
    architecture and tokenizer, or why it cannot run here."""
    if not has_module("transformers") or not has_module("torch"):
        return Unavailable(ckpt, "pip install transformers torch")
    path = Path(ckpt).expanduser()
    if not path.is_file():
        return Unavailable(ckpt, f"AlignScore checkpoint {ckpt!r} not found; download AlignScore-large.ckpt "
                                 "(github.com/yuh-zha/AlignScore) on a connected machine and pass its path")
    bdir = local_model_dir(backbone)
    if bdir is None:
        return missing_model(backbone, "AlignScore needs its backbone's config and tokenizer locally")
    import torch
    from transformers import AutoConfig, AutoModel, AutoTokenizer

    try:
        raw = torch.load(str(path), map_location="cpu", weights_only=True)
    except Exception as e:  # noqa: BLE001 - any unreadable file is reported, not raised
        return Unavailable(ckpt, f"cannot read {ckpt!r} as tensors only ({type(e).__name__}: {e}); save its "
                                 "'state_dict' with torch.save once and pass that file")
    state = raw.get("state_dict", raw) if isinstance(raw, dict) else {}
    base = {k.removeprefix("base_model."): v for k, v in state.items() if k.startswith("base_model.")}
    if not base or "tri_layer.weight" not in state:
        return Unavailable(ckpt, "not an AlignScore checkpoint (no base_model.* and tri_layer.* weights)")
    config = AutoConfig.from_pretrained(str(bdir))
    model = AutoModel.from_config(config)
    missing = set(model.load_state_dict(base, strict=False).missing_keys) & dict(model.named_parameters()).keys()
    if missing:
        return Unavailable(ckpt, f"checkpoint does not fit {backbone!r}: {len(missing)} weights missing, "
                                 f"e.g. {sorted(missing)[0]}")
    head = torch.nn.Linear(config.hidden_size, 3)
    head.load_state_dict({"weight": state["tri_layer.weight"], "bias": state["tri_layer.bias"]})
    tok = AutoTokenizer.from_pretrained(str(bdir))
    limit = tok.model_max_length if 0 < tok.model_max_length < 1_000_000 else 512
    return AlignScorer(tok, model.eval(), head.eval(), int(limit), batch_size)
