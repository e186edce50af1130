"""The quality stage's configuration and its per-group computers (SPEC section 6).

A group (`metrics.quality.METRIC_GROUPS`) is defined by its params (everything that changes its
numbers: model, reference corpus, window, ...), its code version and the method recorded with its
rows. `load_computer` builds a group's computer once per worker (loading its model), or says why it
cannot (`Unavailable`: the model is not on this machine); a computer turns a chunk of `QualityUnit`s
into `trace_metrics` rows without touching the store, so it can run in any process.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, fields
from typing import Any, Literal

from legival_core.catalog import MPNET, SMOLLM2, canonical_model
from legival_core.metrics.quality import METRIC_GROUPS
from legival_core.quality._local import Unavailable
from legival_core.quality.alignscore import (
    ALIGNSCORE_VERSION,
    DEFAULT_ALIGNSCORE_BACKBONE,
    DEFAULT_ALIGNSCORE_CKPT,
)
from legival_core.quality.clarity import (
    BUILTIN_REFERENCE,
    CLARITY_VERSION,
    ClarityReference,
    SsAnchor,
    clarity,
)
from legival_core.quality.cohesion import (
    COHESION_VERSION,
    CROSS_ENCODER_VERSION,
    DEFAULT_CROSS_ENCODER,
    DEFAULT_MOMENTUM,
    MOMENTUM_VERSION,
    CohesionParams,
    coherence_momentum,
    cohesion_from_embeddings,
)
from legival_core.quality.consistency import (
    DEFAULT_FACTCC_MODEL,
    DEFAULT_NLI_MODEL,
    FACTCC_VERSION,
    NLI_VERSION,
    NLI_WINDOW,
    nli_consistency,
)
from legival_core.quality.fluency import PERPLEXITY_VERSION
from legival_core.quality.informativeness import (
    BERTSCORE_LAYER,
    BERTSCORE_VERSION,
    BLEURT_VERSION,
    DEFAULT_BERTSCORE_MODEL,
    DEFAULT_BLEURT_CKPT,
)
from legival_core.quality.z3_ir import DEFAULT_TIMEOUT_MS
from legival_core.segment import SEGMENTER_VERSION
from legival_core.types import canonical_json

Z3_VERSION = "z3-extract-2"
"""z3-extract-2: JSS and RCR only where FAS0 = 1 (`z3_verify.sound_only`), 'undefined' elsewhere."""
Z3_DATASETS = ("gsm8k",)

GroupName = Literal["clarity", "cohesion", "coherence_momentum", "cross_encoder", "nli", "alignscore", "factcc",
                    "perplexity", "bertscore", "bleurt", "z3"]


@dataclass(frozen=True, slots=True)
class QualityConfig:
    """Which model each metric uses; all of it is recorded in the params of the rows."""

    embed_model: str = MPNET
    """Cohesion's sentence embeddings (the gCoT paper's all-mpnet-base-v2; redundancy keeps MiniLM)."""
    embed_backend: str = "auto"
    """Cohesion's embedding backend (`embed.BACKENDS`; auto: ONNX Runtime on a CPU). Not in any key: fp32
    backends agree within 1e-6 (tested)."""
    cohesion: CohesionParams = CohesionParams()
    clarity_reference: ClarityReference = BUILTIN_REFERENCE
    ss_anchor: SsAnchor = "paper"
    """SS_lite anchor: "paper" (p5) or "script" (the authors' p95; `quality.clarity`)."""
    momentum_model: str = DEFAULT_MOMENTUM
    cross_encoder_model: str = DEFAULT_CROSS_ENCODER
    nli_model: str = DEFAULT_NLI_MODEL
    nli_window: int = NLI_WINDOW
    factcc_model: str = DEFAULT_FACTCC_MODEL
    alignscore_ckpt: str = DEFAULT_ALIGNSCORE_CKPT
    alignscore_backbone: str = DEFAULT_ALIGNSCORE_BACKBONE
    ppl_model: str = SMOLLM2
    ppl_max_length: int = 1024
    ppl_stride: int = 512
    bertscore_model: str = DEFAULT_BERTSCORE_MODEL
    bleurt_ckpt: str = DEFAULT_BLEURT_CKPT
    z3_timeout_ms: int = DEFAULT_TIMEOUT_MS
    z3_workers: int | None = None
    """Processes the Z3 group runs on (`ProcessExecutor`; None: every CPU, 1: in process). Not in any
    key: the rows are the same (tested)."""
    z3_trace_timeout_s: float = 60.0
    """Wall-clock limit per trace (IR extraction and every check) on the process pool: a trace that
    runs longer, or whose process dies, gets 'error' rows with the reason and the rest of its chunk is
    computed (`Work.isolate`). Not in any key (only a hung trace's rows depend on it)."""
    chunk: int = 200
    """Traces per chunk: the commit unit (a crash loses at most one chunk)."""


@dataclass(frozen=True, slots=True)
class QualityUnit:
    """One trace to score, with everything any group reads (`spans`: its steps, for cohesion)."""

    trace_id: str
    dataset: str
    reasoning: str
    answer_text: str
    question: str
    spans: tuple[tuple[int, int], ...] = ()
    cached: tuple[tuple[str, bytes], ...] = ()
    """(sentence hash, vector) of its steps found in the shared embedding cache (cohesion)."""


@dataclass(frozen=True, slots=True)
class Group:
    """One metric group at one configuration: the key of its rows and the method they record."""

    name: str
    params: str
    version: str
    method: str
    datasets: tuple[str, ...] | None = None
    """Only traces of these datasets (None: all)."""

    @property
    def metrics(self) -> tuple[str, ...]:
        return METRIC_GROUPS[self.name]


Row = dict[str, Any]
Computer = Callable[[Sequence[QualityUnit]], list[Row]]


def row(tid: str, metric: str, g: Group, value: float | None, status: str = "ok",
        detail: dict[str, Any] | None = None, method: str | None = None) -> Row:
    """A `trace_metrics` row of group `g` ('ok' with no value becomes 'undefined')."""
    return {"trace_id": tid, "metric": metric, "params": g.params, "code_version": g.version,
            "value": None if value is None else float(value), "method": method or g.method,
            "status": status if value is not None or status != "ok" else "undefined",
            "detail": None if detail is None else canonical_json(detail)}


def unavailable_rows(g: Group, trace_ids: Sequence[str], reason: str) -> list[Row]:
    """Placeholder rows (value NULL) of every metric of `g`, replaced once its model is installed."""
    detail = {"reason": reason}
    return [row(t, m, g, None, "unavailable", detail) for t in trace_ids for m in g.metrics]


def group_defs(cfg: QualityConfig) -> dict[str, Group]:
    """Every group at this configuration, in `METRIC_GROUPS` order."""
    ref = cfg.clarity_reference
    ppl = canonical_model(cfg.ppl_model)
    embed = canonical_model(cfg.embed_model)
    groups = [
        Group("clarity", canonical_json({"reference": {k: v for k, v in ref.as_dict().items() if k != "corpus"},
                                         "ss_anchor": cfg.ss_anchor}),
              CLARITY_VERSION, f"regex-fre/{ref.ref_id}"),
        Group("cohesion", canonical_json({"model": embed, "segmenter": SEGMENTER_VERSION, **asdict(cfg.cohesion)}),
              COHESION_VERSION, embed),
        Group("coherence_momentum", canonical_json({"model": cfg.momentum_model, "k": 10, "seed": 0, "tau": 1.0}),
              MOMENTUM_VERSION, cfg.momentum_model),
        Group("cross_encoder", canonical_json({"model": cfg.cross_encoder_model}), CROSS_ENCODER_VERSION,
              cfg.cross_encoder_model),
        Group("nli", canonical_json({"model": cfg.nli_model, "window": cfg.nli_window}), NLI_VERSION, cfg.nli_model),
        Group("alignscore", canonical_json({"ckpt": cfg.alignscore_ckpt, "backbone": cfg.alignscore_backbone,
                                            "mode": "nli_sp"}), ALIGNSCORE_VERSION, cfg.alignscore_ckpt),
        Group("factcc", canonical_json({"model": cfg.factcc_model}), FACTCC_VERSION, cfg.factcc_model),
        Group("perplexity", canonical_json({"model": ppl, "max_length": cfg.ppl_max_length,
                                            "stride": cfg.ppl_stride}),
              PERPLEXITY_VERSION, ppl),
        Group("bertscore", canonical_json({"model": cfg.bertscore_model, "layer": BERTSCORE_LAYER,
                                           "rescale": "baseline"}), BERTSCORE_VERSION, cfg.bertscore_model),
        Group("bleurt", canonical_json({"ckpt": cfg.bleurt_ckpt}), BLEURT_VERSION, cfg.bleurt_ckpt),
        Group("z3", canonical_json({"extractor": "deterministic", "timeout_ms": cfg.z3_timeout_ms}), Z3_VERSION,
              "z3+ir_extract", Z3_DATASETS),
    ]
    return {g.name: g for g in groups}


def load_computer(g: Group, cfg: QualityConfig) -> Computer | Unavailable:
    """The computer of group `g` with its model loaded, or why its model is not here."""
    loaders: dict[str, Callable[[Group, QualityConfig], Computer | Unavailable]] = {
        "clarity": _clarity, "cohesion": _cohesion, "coherence_momentum": _momentum,
        "cross_encoder": _cross_encoder, "nli": _nli, "alignscore": _alignscore, "factcc": _factcc,
        "perplexity": _perplexity, "bertscore": _bertscore, "bleurt": _bleurt, "z3": _z3,
    }
    return loaders[g.name](g, cfg)


# ------------------------------------------------------------------ computers


def _clarity(g: Group, cfg: QualityConfig) -> Computer:
    def run(units: Sequence[QualityUnit]) -> list[Row]:
        rows: list[Row] = []
        for u in units:
            s = clarity(u.reasoning, cfg.clarity_reference, cfg.ss_anchor)
            raw = {f.name: round(getattr(s.raw, f.name), 4) for f in fields(s.raw)}  # traces.parquet's clarity_raw_*
            for metric, v in (("clarity_clx", s.clx), ("clarity_rd", s.rd), ("clarity_se", s.se),
                              ("clarity_dc", s.dc), ("clarity_ss", s.ss_lite)):
                rows.append(row(u.trace_id, metric, g, v, detail=raw if metric == "clarity_clx" else None))
        return rows

    return run


def _cohesion(g: Group, cfg: QualityConfig) -> Computer | Unavailable:
    from legival_core.embed import resolve_model_path

    try:
        resolve_model_path(cfg.embed_model)
    except RuntimeError as e:
        return Unavailable(cfg.embed_model, str(e))
    return CohesionComputer(g, cfg)


class CohesionComputer:
    """Cohesion of a chunk from its steps' embeddings: those in the shared cache (`QualityUnit.cached`,
    e.g. stored by the efficiency stage with the same model) are not computed again; the vectors it
    does compute wait in `drain_embeddings()` for the stage to store."""

    def __init__(self, g: Group, cfg: QualityConfig) -> None:
        from legival_core.embed import Embedder

        self.g, self.cfg = g, cfg
        self.embedder = Embedder(cfg.embed_model, cfg.embed_backend)
        self._new: list[Row] = []

    def drain_embeddings(self) -> list[Row]:
        out, self._new = self._new, []
        return out

    def __call__(self, units: Sequence[QualityUnit]) -> list[Row]:
        import numpy as np

        g, cfg = self.g, self.cfg
        sents = {u.trace_id: [u.reasoning[a:b] for a, b in u.spans] for u in units}
        unique = list(dict.fromkeys(s for ss in sents.values() if len(ss) >= 2 for s in ss))
        index = {s: i for i, s in enumerate(unique)}
        res = self.embedder.embed(unique, {h: v for u in units for h, v in u.cached}) if unique else None
        emb = res.vectors if res is not None else np.zeros((0, 1), dtype=np.float32)
        if res is not None:
            self._new += res.cache_rows(self.embedder.key)
        rows: list[Row] = []
        for t, ss in sents.items():
            r = cohesion_from_embeddings(emb[[index[s] for s in ss]], cfg.cohesion) if len(ss) >= 2 else None
            if r is None:
                detail = {"n": len(ss), "reason": "fewer than 2 sentences"}
                rows += [row(t, "cohesion", g, None, "undefined", detail),
                         row(t, "cohesion_band_ratio", g, None, "undefined", detail)]
                continue
            d = {k: round(v, 6) if isinstance(v, float) else v for k, v in asdict(r).items()}
            rows += [row(t, "cohesion", g, r.cohesion, detail=d), row(t, "cohesion_band_ratio", g, r.band_ratio)]
        return rows


def _momentum(g: Group, cfg: QualityConfig) -> Computer | Unavailable:
    from legival_core.quality.cohesion import load_momentum_scorer
    from legival_core.segment import segment

    score = load_momentum_scorer(cfg.momentum_model)
    if isinstance(score, Unavailable):
        return score

    def run(units: Sequence[QualityUnit]) -> list[Row]:
        rows = []
        for u in units:
            r = coherence_momentum(segment(u.reasoning).sentences(), score)
            rows.append(row(u.trace_id, "coherence_momentum", g, None if r is None else r.mean_prob,
                            "ok" if r else "undefined", None if r is None else asdict(r)))
        return rows

    return run


def _cross_encoder(g: Group, cfg: QualityConfig) -> Computer | Unavailable:
    from legival_core.quality.cohesion import load_cross_encoder

    score = load_cross_encoder(cfg.cross_encoder_model)
    if isinstance(score, Unavailable):
        return score

    def run(units: Sequence[QualityUnit]) -> list[Row]:
        return [row(u.trace_id, "cross_encoder", g, score(u.question, u.reasoning)) for u in units]

    return run


def _nli(g: Group, cfg: QualityConfig) -> Computer | Unavailable:
    from legival_core.quality.consistency import load_nli

    model = load_nli(cfg.nli_model)
    if isinstance(model, Unavailable):
        return model

    def run(units: Sequence[QualityUnit]) -> list[Row]:
        rows: list[Row] = []
        for u in units:
            s = nli_consistency(u.question, u.reasoning, model.probs, cfg.nli_window)
            t = u.trace_id
            rows += [row(t, "nli_q2s_mean", g, s.q2s_mean, detail={"n_sentences": s.n_sentences}),
                     row(t, "nli_q2s_max", g, s.q2s_max), row(t, "nli_intra", g, s.intra),
                     row(t, "nli_support", g, s.support)]
        return rows

    return run


def _alignscore(g: Group, cfg: QualityConfig) -> Computer | Unavailable:
    """S_support (question -> trace) and S_imp (trace -> response), `quality.alignscore`."""
    from legival_core.quality.alignscore import align_both, load_alignscore

    scorer = load_alignscore(cfg.alignscore_ckpt, cfg.alignscore_backbone)
    if isinstance(scorer, Unavailable):
        return scorer

    def run(units: Sequence[QualityUnit]) -> list[Row]:
        rows: list[Row] = []
        for u in units:
            s = align_both(u.question, u.reasoning, u.answer_text, scorer.score)
            rows += [row(u.trace_id, "alignscore_support", g, s.support,
                         detail=None if s.support is not None else {"reason": "empty trace"}),
                     row(u.trace_id, "alignscore_imp", g, s.imp,
                         detail=None if s.imp is not None else {"reason": "no response after the trace"})]
        return rows

    return run


def _factcc(g: Group, cfg: QualityConfig) -> Computer | Unavailable:
    from legival_core.quality.consistency import load_factcc

    score = load_factcc(cfg.factcc_model)
    if isinstance(score, Unavailable):
        return score

    def run(units: Sequence[QualityUnit]) -> list[Row]:
        return [row(u.trace_id, "factcc", g, score(u.reasoning, u.answer_text)) for u in units]

    return run


def _perplexity(g: Group, cfg: QualityConfig) -> Computer | Unavailable:
    from legival_core.quality.fluency import load_causal_lm, perplexity

    lm = load_causal_lm(cfg.ppl_model)
    if isinstance(lm, Unavailable):
        return lm

    def run(units: Sequence[QualityUnit]) -> list[Row]:
        rows = []
        for u in units:
            p = perplexity(u.reasoning, lm, cfg.ppl_max_length, cfg.ppl_stride)
            rows.append(row(u.trace_id, "perplexity", g, p.value, "ok" if p.value is not None else "undefined",
                            {"n_tokens": p.n_tokens}))
        return rows

    return run


def _pairwise(g: Group, score: Callable[[list[str], list[str]], list[float]]) -> Computer:
    metric = g.metrics[0]

    def run(units: Sequence[QualityUnit]) -> list[Row]:
        vals = score([u.answer_text for u in units], [u.reasoning for u in units])
        return [row(u.trace_id, metric, g, v) for u, v in zip(units, vals, strict=True)]

    return run


def _bertscore(g: Group, cfg: QualityConfig) -> Computer | Unavailable:
    from legival_core.quality.informativeness import load_bertscore

    score = load_bertscore(cfg.bertscore_model)
    return score if isinstance(score, Unavailable) else _pairwise(g, score)


def _bleurt(g: Group, cfg: QualityConfig) -> Computer | Unavailable:
    from legival_core.quality.informativeness import load_bleurt

    score = load_bleurt(cfg.bleurt_ckpt)
    return score if isinstance(score, Unavailable) else _pairwise(g, score)


def _z3(g: Group, cfg: QualityConfig) -> Computer:
    from legival_core.quality.ir_extract import extract_ir
    from legival_core.quality.z3_verify import sound_only, verify_ir

    def run(units: Sequence[QualityUnit]) -> list[Row]:
        rows: list[Row] = []
        for u in units:
            t = u.trace_id
            try:
                ir = extract_ir(u.reasoning)
            except Exception as e:  # noqa: BLE001 - an extractor bug on one trace must not stop the stage
                ir, err = None, f"{type(e).__name__}: {e}"
            else:
                err = "no arithmetic chain found"
            if ir is None:
                rows += [row(t, m, g, None, "unparsed", {"reason": err}) for m in g.metrics]
                continue
            try:
                r = verify_ir(ir, fallback_text=u.reasoning, timeout_ms=cfg.z3_timeout_ms)
            except Exception as e:  # noqa: BLE001 - one bad IR must not stop its chunk
                rows += [row(t, m, g, None, "error", {"reason": f"{type(e).__name__}: {e}"}) for m in g.metrics]
                continue
            d = {"z3_status": r.status, "answer": r.answer, "tracks": len(r.tracks), "dal": r.dal,
                 "unknown_checks": r.unknown_checks}
            bad = "timeout" if r.status in ("timeout", "unknown") or r.unknown_checks else "undefined"
            jss, rcr = sound_only(r)
            unsound = None if r.fas0 == 1.0 else {"reason": "defined only when FAS0 = 1", "fas0": r.fas0}
            for m, v in (("z3_acs", r.acs), ("z3_fas0", r.fas0), ("z3_jss", jss), ("z3_rcr", rcr)):
                if m in ("z3_jss", "z3_rcr") and unsound:
                    rows.append(row(t, m, g, None, "undefined" if r.fas0 == 0.0 else bad, unsound))
                    continue
                rows.append(row(t, m, g, v, "ok" if v is not None else bad, d if m == "z3_acs" else None))
        return rows

    return run
