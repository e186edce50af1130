"""Coverage/informativeness: BERTScore and BLEURT adapters (gCoT paper).

From `characterization/automatic/informativeness/informativeness.py` in sanchezgt/md-eval-cot (commit
d9bb4c77, cited as [info]): candidate = the final answer text, reference = the trace, both through
`normalize_math_md` (``$..$`` kept as ``EQ(..)``).

- S_info_bert = BERTScore F1 rescaled with the baseline, as [info] builds its scorer
  (``BERTScorer(model_type=microsoft/deberta-xlarge-mnli, lang="en", rescale_with_baseline=True)``, no
  IDF): with P, R the greedy-matching precision and recall of the layer-40 token embeddings,
  ``F = 2PR / (P + R)`` and ``S_info_bert = (F - b_F) / (1 - b_F)``, b_F the F column of bert-score's
  bundled baseline file `rescale_baseline/en/microsoft/deberta-xlarge-mnli.tsv`, row 40 (its
  `rescale_with_baseline` formula, applied here from the same file so that a model passed as a local
  directory finds it too: by its hub id, else by the directory's name). Rescaled values are not
  bounded to [0, 1] (an unrelated pair scores near 0 or below).
- S_info_bleurt = BLEURT-20.

Both report `Unavailable` unless the package and the model are on this machine; nothing is downloaded.
"""

from __future__ import annotations

import csv
import re
from collections.abc import Callable
from pathlib import Path
from typing import Any

from legival_core.quality._local import Unavailable, has_module, local_model_dir, missing_model

BERTSCORE_VERSION = "bertscore-3"
"""bertscore-3: texts encoded with a leading space, as bert-score under transformers 4 (`_with_prefix_space`);
bertscore-2: F1 rescaled with bert-score's baseline ([info]); bertscore-1 stored the raw F1."""
BERTSCORE_LAYER = 40
"""bert-score's layer for microsoft/deberta-xlarge-mnli (`model2layers`), also the baseline's row."""
BLEURT_VERSION = "bleurt-2"
"""bleurt-2: the given checkpoint scores (`load_bleurt`); bleurt-1 went through evaluate, which ignores it."""
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


def baseline_file(model: str, root: Path) -> Path | None:
    """bert-score's baseline for `model` under `root` (`bert_score/rescale_baseline/<lang>`): by hub id,
    else the one file named after the model (the last part of a directory path)."""
    direct = root / f"{model}.tsv"
    if direct.is_file():
        return direct
    found = sorted(root.glob(f"**/{Path(model).name}.tsv"))
    return found[0] if len(found) == 1 else None


def read_baseline(path: Path, layer: int = BERTSCORE_LAYER) -> tuple[float, float, float]:
    """(b_P, b_R, b_F) of `layer`: the row at that position of the CSV (header LAYER,P,R,F), as bert-score
    reads it (`pd.read_csv(path).iloc[layer]`)."""
    with path.open(newline="", encoding="utf-8") as fh:
        rows = list(csv.DictReader(fh))
    r = rows[layer]
    return float(r["P"]), float(r["R"]), float(r["F"])


def rescale(value: float, baseline: float) -> float:
    """bert-score's `rescale_with_baseline`: ``(value - b) / (1 - b)``."""
    return (value - baseline) / (1.0 - baseline)


def load_bertscore(model: str = DEFAULT_BERTSCORE_MODEL) -> Scorer | Unavailable:
    if not has_module("bert_score"):
        return Unavailable(model, "pip install bert-score")
    path = local_model_dir(model)
    if path is None:
        return missing_model(model, "download it on a connected machine and pass its directory")
    import bert_score
    from bert_score import BERTScorer

    base = baseline_file(model, Path(bert_score.__file__).parent / "rescale_baseline" / "en")
    if base is None:
        return Unavailable(model, f"bert-score ships no English rescaling baseline for {model!r}")
    b_f = read_baseline(base)[2]
    scorer = BERTScorer(model_type=str(path), num_layers=BERTSCORE_LAYER, lang="en", rescale_with_baseline=False,
                        device="cpu")
    scorer._tokenizer = _with_prefix_space(scorer._tokenizer, path)

    def score(cands: list[str], refs: list[str]) -> list[float]:
        _, _, f1 = scorer.score([normalize_math_md(c) for c in cands], [normalize_math_md(r) for r in refs])
        return [rescale(float(x), b_f) for x in f1.tolist()]

    return score


def _with_prefix_space(tokenizer: Any, path: Path) -> Any:
    """bert-score encodes a sentence with ``add_prefix_space=True`` when its tokenizer is a GPT-2 or
    RoBERTa one (`bert_score.utils.sent_encode`). Under transformers 4, DeBERTa's tokenizer subclassed
    GPT-2's, so the paper's scores saw "ĠThe", not "The", as the first token. Under transformers 5 it
    no longer does, and `encode` ignores an `add_prefix_space` keyword anyway, so bert-score would
    silently drop the space: a tokenizer whose pre-tokenizer is byte-level without the prefix space is
    loaded again with it set (a WordPiece or SentencePiece tokenizer is left alone)."""
    if not _byte_level_without_prefix_space(tokenizer):
        return tokenizer
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(str(path), add_prefix_space=True)


def _byte_level_without_prefix_space(tokenizer: Any) -> bool:
    import json

    backend = getattr(tokenizer, "backend_tokenizer", None)
    if backend is None:
        return False
    pre = json.loads(backend.to_str()).get("pre_tokenizer") or {}
    parts = pre.get("pretokenizers", [pre]) if pre.get("type") == "Sequence" else [pre]
    return any(p.get("type") == "ByteLevel" and not p.get("add_prefix_space") for p in parts)


def load_bleurt(ckpt: str = DEFAULT_BLEURT_CKPT) -> Scorer | Unavailable:
    """BLEURT from a local checkpoint directory, through `bleurt.score.BleurtScorer` itself. [info]
    calls ``evaluate.load("bleurt", checkpoint=ckpt)``, but evaluate's BLEURT takes its checkpoint from
    the config name only (default bleurt-base-128, downloaded) and ignores `checkpoint`; the paper
    names BLEURT-20, so the checkpoint given here is the one that scores (bleurt-2)."""
    if not has_module("bleurt"):
        return Unavailable(ckpt, "pip install tensorflow git+https://github.com/google-research/bleurt "
                                 "and pass a local BLEURT-20 checkpoint directory")
    path = local_model_dir(ckpt)
    if path is None:
        return Unavailable(ckpt, f"BLEURT checkpoint {ckpt!r} is not a local directory")
    from bleurt import score as bleurt_score

    scorer = bleurt_score.BleurtScorer(str(path))

    def score(cands: list[str], refs: list[str]) -> list[float]:
        out = scorer.score(references=[normalize_math_md(r) for r in refs],
                           candidates=[normalize_math_md(c) for c in cands])
        return [float(x) for x in out]

    return score
