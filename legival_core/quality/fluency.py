"""Surface fluency: perplexity of the trace under a fixed causal LM, with a sliding window (gCoT paper).

Definition from `characterization/automatic/coherence/coherence-perplexity.py` in sanchezgt/md-eval-cot
(commit d9bb4c77): the text (stripped) is tokenised once; windows end at ``i + stride`` for i = 0,
stride, 2 stride, ...; each window starts ``max_length`` tokens before its end and scores only its
last ``trg_len = end - i`` tokens (earlier ones are context, label -100); the window's mean loss is
weighted by trg_len; ``PPL = exp(sum(loss * trg_len) / sum(trg_len))`` (max_length 1024, stride 512).
The authors used GPT-2; here the default is the embedded SmolLM2-135M-Instruct (`catalog.SMOLLM2`,
`smollm2_safetensors_dir()`; older spellings such as "smollm2-135m-instruct" are accepted), and the
model used is stored as the score's method.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

from legival_core.catalog import SMOLLM2, canonical_model
from legival_core.quality._local import Unavailable, has_module, local_model_dir, missing_model

PERPLEXITY_VERSION = "ppl-1"
EMBEDDED_LM = SMOLLM2


@dataclass(frozen=True, slots=True)
class Perplexity:
    value: float | None
    n_tokens: int


@dataclass
class CausalLM:
    model_id: str
    tokenizer: Any
    model: Any


def perplexity(text: str, lm: CausalLM, max_length: int = 1024, stride: int = 512) -> Perplexity:
    import torch

    text = (text or "").strip()
    if not text:
        return Perplexity(None, 0)
    ids = lm.tokenizer(text, return_tensors="pt")["input_ids"][0]
    n = int(ids.numel())
    if n == 0:
        return Perplexity(None, 0)
    nll, count = 0.0, 0
    with torch.inference_mode():
        for i in range(0, n, stride):
            begin, end = max(i + stride - max_length, 0), min(i + stride, n)
            trg = end - i
            if trg <= 0:
                break
            window = ids[begin:end]
            labels = window.clone()
            labels[:-trg] = -100
            out = lm.model(window.unsqueeze(0), labels=labels.unsqueeze(0))
            loss = float(out.loss)
            if math.isnan(loss):  # a window whose only target is its first token: nothing to score
                loss = 0.0
                trg = 0
            nll += loss * trg
            count += trg
            if end == n:
                break
    return Perplexity(math.exp(nll / count) if count else None, n)


def load_causal_lm(model: str = EMBEDDED_LM) -> CausalLM | Unavailable:
    """A shipped model (`catalog.SMOLLM2`, `catalog.GEMMA3_270M`, any accepted spelling) loads from
    its export; anything else is a local directory or a cached hub id."""
    if not has_module("transformers") or not has_module("torch"):
        return Unavailable(model, "pip install transformers torch")
    from legival_core.backends.shipped import ModelNotInstalled, safetensors_dir, shipped_model

    shipped = shipped_model(model)
    if shipped is not None:
        try:
            path = safetensors_dir(shipped)
        except ModelNotInstalled as e:
            return Unavailable(model, str(e))
    else:
        found = local_model_dir(model)
        if found is None:
            return missing_model(model, "download it on a connected machine and pass its directory")
        path = found
    from transformers import AutoModelForCausalLM, AutoTokenizer

    tok = AutoTokenizer.from_pretrained(str(path))
    mdl = AutoModelForCausalLM.from_pretrained(str(path))
    mdl.eval()
    return CausalLM(canonical_model(model), tok, mdl)
