"""The quality stage: the gCoT text-quality metrics (SPEC section 6) for traces that lack them.

Every score is one `trace_metrics` row keyed by (trace, metric, params, code version); params carry
everything that changes the number (model, reference corpus, window, ...). A group of metrics is
computed for the traces with no row for its first metric at those params and version, in chunks that
each commit, so a rerun computes nothing and a crash loses one chunk. A metric whose model is not on
this machine gets rows with value NULL and status 'unavailable' (method = the model asked for, detail
= why); once the model is installed those rows are replaced by real ones on the next run. Z3 runs on
GSM8K traces only, through automatic IR extraction; a trace without an extractable IR gets status
'unparsed' rows (counted in the summary), a metric the verifier leaves undefined gets 'undefined'.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import asdict, dataclass, field
from typing import TYPE_CHECKING, Any, Literal

from legival_core.embed import DEFAULT_MODEL as DEFAULT_EMBED_MODEL
from legival_core.quality._local import Unavailable
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
    ALIGNSCORE_VERSION,
    DEFAULT_ALIGNSCORE_CKPT,
    DEFAULT_FACTCC_MODEL,
    DEFAULT_NLI_MODEL,
    FACTCC_VERSION,
    NLI_VERSION,
    NLI_WINDOW,
    nli_consistency,
)
from legival_core.quality.fluency import EMBEDDED_LM, PERPLEXITY_VERSION
from legival_core.quality.informativeness import (
    BERTSCORE_VERSION,
    BLEURT_VERSION,
    DEFAULT_BERTSCORE_MODEL,
    DEFAULT_BLEURT_CKPT,
)
from legival_core.metrics.quality import METRIC_GROUPS, QUALITY_METRICS, resolve_groups
from legival_core.segment import SEGMENTER_VERSION
from legival_core.types import canonical_json

if TYPE_CHECKING:
    import polars as pl

    from legival_core.store import Store

Progress = Callable[[str, int, int], None]
"""progress(phase, done, total)."""

Z3_VERSION = "z3-extract-1"
Z3_DATASETS = ("gsm8k",)

GroupName = Literal["clarity", "cohesion", "coherence_momentum", "cross_encoder", "nli", "alignscore", "factcc",
                    "perplexity", "bertscore", "bleurt", "z3"]


@dataclass(frozen=True, slots=True)
class QualityConfig:
    """Which model each metric uses; all of it is recorded in the params of the rows."""

    embed_model: str = DEFAULT_EMBED_MODEL
    cohesion: CohesionParams = CohesionParams()
    clarity_reference: ClarityReference = BUILTIN_REFERENCE
    ss_anchor: SsAnchor = "repo"
    momentum_model: str = DEFAULT_MOMENTUM
    cross_encoder_model: str = DEFAULT_CROSS_ENCODER
    nli_model: str = DEFAULT_NLI_MODEL
    nli_window: int = NLI_WINDOW
    factcc_model: str = DEFAULT_FACTCC_MODEL
    alignscore_ckpt: str = DEFAULT_ALIGNSCORE_CKPT
    ppl_model: str = EMBEDDED_LM
    ppl_max_length: int = 1024
    ppl_stride: int = 512
    bertscore_model: str = DEFAULT_BERTSCORE_MODEL
    bleurt_ckpt: str = DEFAULT_BLEURT_CKPT
    z3_timeout_ms: int = 10_000
    chunk: int = 200


@dataclass(slots=True)
class QualitySummary:
    computed: dict[str, int] = field(default_factory=dict)
    """group -> traces scored this run."""
    rows: dict[str, int] = field(default_factory=dict)
    """group -> rows inserted this run (including 'unavailable' / 'unparsed' rows)."""
    unavailable: dict[str, str] = field(default_factory=dict)
    """group -> why its model is not here."""
    seconds: dict[str, float] = field(default_factory=dict)
    z3_unparsed: int = 0
    z3_extracted: int = 0

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


# ------------------------------------------------------------------ per-group definitions

Row = dict[str, Any]
Computer = Callable[["pl.DataFrame"], list[Row]]


@dataclass(frozen=True, slots=True)
class _Group:
    name: str
    params: str
    version: str
    method: str
    load: Callable[[_Group], Computer | Unavailable]
    datasets: tuple[str, ...] | None = None


def _row(tid: str, metric: str, g: _Group, value: float | None, status: str = "ok",
         detail: dict[str, Any] | None = None, method: str | None = None) -> Row:
    return {"trace_id": tid, "metric": metric, "params": g.params, "code_version": g.version,
            "value": None if value is None else float(value), "method": method or g.method,
            "status": status if value is not None or status != "ok" else "undefined",
            "detail": None if detail is None else canonical_json(detail)}


def _groups(store: Store, cfg: QualityConfig) -> dict[str, _Group]:
    ref = cfg.clarity_reference
    coh = asdict(cfg.cohesion)
    groups = [
        _Group("clarity", canonical_json({"reference": {k: v for k, v in ref.as_dict().items() if k != "corpus"},
                                          "ss_anchor": cfg.ss_anchor}),
               CLARITY_VERSION, f"regex-fre/{ref.ref_id}", lambda g: _clarity(g, cfg)),
        _Group("cohesion", canonical_json({"model": cfg.embed_model, "segmenter": SEGMENTER_VERSION, **coh}),
               COHESION_VERSION, cfg.embed_model, lambda g: _cohesion(g, store, cfg)),
        _Group("coherence_momentum", canonical_json({"model": cfg.momentum_model, "k": 10, "seed": 0, "tau": 1.0}),
               MOMENTUM_VERSION, cfg.momentum_model, lambda g: _momentum(g, cfg)),
        _Group("cross_encoder", canonical_json({"model": cfg.cross_encoder_model}), CROSS_ENCODER_VERSION,
               cfg.cross_encoder_model, lambda g: _cross_encoder(g, cfg)),
        _Group("nli", canonical_json({"model": cfg.nli_model, "window": cfg.nli_window}), NLI_VERSION,
               cfg.nli_model, lambda g: _nli(g, cfg)),
        _Group("alignscore", canonical_json({"ckpt": cfg.alignscore_ckpt}), ALIGNSCORE_VERSION,
               cfg.alignscore_ckpt, lambda g: _alignscore(g, cfg)),
        _Group("factcc", canonical_json({"model": cfg.factcc_model}), FACTCC_VERSION, cfg.factcc_model,
               lambda g: _factcc(g, cfg)),
        _Group("perplexity", canonical_json({"model": cfg.ppl_model, "max_length": cfg.ppl_max_length,
                                             "stride": cfg.ppl_stride}),
               PERPLEXITY_VERSION, cfg.ppl_model, lambda g: _perplexity(g, cfg)),
        _Group("bertscore", canonical_json({"model": cfg.bertscore_model}), BERTSCORE_VERSION,
               cfg.bertscore_model, lambda g: _pairwise(g, "bertscore", cfg)),
        _Group("bleurt", canonical_json({"ckpt": cfg.bleurt_ckpt}), BLEURT_VERSION, cfg.bleurt_ckpt,
               lambda g: _pairwise(g, "bleurt", cfg)),
        _Group("z3", canonical_json({"extractor": "deterministic", "timeout_ms": cfg.z3_timeout_ms}), Z3_VERSION,
               "z3+ir_extract", lambda g: _z3(g, cfg), Z3_DATASETS),
    ]
    return {g.name: g for g in groups}


# ------------------------------------------------------------------ computers


def _clarity(g: _Group, cfg: QualityConfig) -> Computer:

    def run(todo: pl.DataFrame) -> list[Row]:
        rows: list[Row] = []
        for tid, text in zip(todo["trace_id"], todo["reasoning"], strict=True):
            s = clarity(text, cfg.clarity_reference, cfg.ss_anchor)
            raw = {"fre": round(s.raw.fre, 4), "ss_complexity": round(s.raw.ss_complexity, 4)}
            for metric, v in (("clarity_clx", s.clx), ("clarity_rd", s.rd), ("clarity_se", s.se),
                              ("clarity_dc", s.dc), ("clarity_ss", s.ss_lite)):
                rows.append(_row(tid, metric, g, v, detail=raw if metric == "clarity_clx" else None))
        return rows

    return run


def _cohesion(g: _Group, store: Store, cfg: QualityConfig) -> Computer | Unavailable:
    import numpy as np

    from legival_core.embed import embed, resolve_model_path
    from legival_core.stages.efficiency import ensure_steps as segment_missing

    try:
        resolve_model_path(cfg.embed_model)
    except RuntimeError as e:
        return Unavailable(cfg.embed_model, str(e))
    segment_missing(store)

    def run(todo: pl.DataFrame) -> list[Row]:
        ids = todo["trace_id"].to_list()
        spans = store.step_spans(ids, SEGMENTER_VERSION)
        texts = dict(zip(ids, todo["reasoning"].to_list(), strict=True))
        sents = {t: [texts[t][a:b] for a, b in spans[t]] for t in ids}
        unique = list(dict.fromkeys(s for t in ids if len(sents[t]) >= 2 for s in sents[t]))
        index = {s: i for i, s in enumerate(unique)}
        emb = embed(unique, cfg.embed_model) if unique else np.zeros((0, 1), dtype=np.float32)
        rows: list[Row] = []
        for t in ids:
            r = cohesion_from_embeddings(emb[[index[s] for s in sents[t]]], cfg.cohesion) if len(sents[t]) >= 2 else None
            if r is None:
                detail = {"n": len(sents[t]), "reason": "fewer than 2 sentences"}
                rows += [_row(t, "cohesion", g, None, "undefined", detail), _row(t, "cohesion_band_ratio", g, None,
                                                                                "undefined", detail)]
                continue
            d = {k: round(v, 6) if isinstance(v, float) else v for k, v in asdict(r).items()}
            rows += [_row(t, "cohesion", g, r.cohesion, detail=d), _row(t, "cohesion_band_ratio", g, r.band_ratio)]
        return rows

    return run


def _momentum(g: _Group, cfg: QualityConfig) -> Computer | Unavailable:
    from legival_core.quality.cohesion import load_momentum_scorer
    from legival_core.segment import segment

    score = load_momentum_scorer(cfg.momentum_model)
    if isinstance(score, Unavailable):
        return score

    def run(todo: pl.DataFrame) -> list[Row]:
        rows = []
        for tid, text in zip(todo["trace_id"], todo["reasoning"], strict=True):
            r = coherence_momentum(segment(text).sentences(), score)
            rows.append(_row(tid, "coherence_momentum", g, None if r is None else r.mean_prob,
                             "ok" if r else "undefined", None if r is None else asdict(r)))
        return rows

    return run


def _cross_encoder(g: _Group, cfg: QualityConfig) -> Computer | Unavailable:
    from legival_core.quality.cohesion import load_cross_encoder

    score = load_cross_encoder(cfg.cross_encoder_model)
    if isinstance(score, Unavailable):
        return score

    def run(todo: pl.DataFrame) -> list[Row]:
        return [_row(t, "cross_encoder", g, score(q, r))
                for t, q, r in zip(todo["trace_id"], todo["question"], todo["reasoning"], strict=True)]

    return run


def _nli(g: _Group, cfg: QualityConfig) -> Computer | Unavailable:
    from legival_core.quality.consistency import load_nli

    model = load_nli(cfg.nli_model)
    if isinstance(model, Unavailable):
        return model

    def run(todo: pl.DataFrame) -> list[Row]:
        rows: list[Row] = []
        for t, q, r in zip(todo["trace_id"], todo["question"], todo["reasoning"], strict=True):
            s = nli_consistency(q, r, model.probs, cfg.nli_window)
            d = {"n_sentences": s.n_sentences}
            rows += [_row(t, "nli_q2s_mean", g, s.q2s_mean, detail=d), _row(t, "nli_q2s_max", g, s.q2s_max),
                     _row(t, "nli_intra", g, s.intra), _row(t, "nli_support", g, s.support)]
        return rows

    return run


def _alignscore(g: _Group, cfg: QualityConfig) -> Computer | Unavailable:
    from legival_core.quality.consistency import load_alignscore

    score = load_alignscore(cfg.alignscore_ckpt)
    if isinstance(score, Unavailable):
        return score

    def run(todo: pl.DataFrame) -> list[Row]:
        return [_row(t, "alignscore", g, score(q, r))
                for t, q, r in zip(todo["trace_id"], todo["question"], todo["reasoning"], strict=True)]

    return run


def _factcc(g: _Group, cfg: QualityConfig) -> Computer | Unavailable:
    from legival_core.quality.consistency import load_factcc

    score = load_factcc(cfg.factcc_model)
    if isinstance(score, Unavailable):
        return score

    def run(todo: pl.DataFrame) -> list[Row]:
        return [_row(t, "factcc", g, score(r, a))
                for t, r, a in zip(todo["trace_id"], todo["reasoning"], todo["answer_text"], strict=True)]

    return run


def _perplexity(g: _Group, cfg: QualityConfig) -> Computer | Unavailable:
    from legival_core.quality.fluency import load_causal_lm, perplexity

    lm = load_causal_lm(cfg.ppl_model)
    if isinstance(lm, Unavailable):
        return lm

    def run(todo: pl.DataFrame) -> list[Row]:
        rows = []
        for t, text in zip(todo["trace_id"], todo["reasoning"], strict=True):
            p = perplexity(text, lm, cfg.ppl_max_length, cfg.ppl_stride)
            rows.append(_row(t, "perplexity", g, p.value, "ok" if p.value is not None else "undefined",
                             {"n_tokens": p.n_tokens}))
        return rows

    return run


def _pairwise(g: _Group, kind: Literal["bertscore", "bleurt"], cfg: QualityConfig) -> Computer | Unavailable:
    from legival_core.quality.informativeness import load_bertscore, load_bleurt

    score = load_bertscore(cfg.bertscore_model) if kind == "bertscore" else load_bleurt(cfg.bleurt_ckpt)
    if isinstance(score, Unavailable):
        return score
    metric = METRIC_GROUPS[kind][0]

    def run(todo: pl.DataFrame) -> list[Row]:
        vals = score(todo["answer_text"].to_list(), todo["reasoning"].to_list())
        return [_row(t, metric, g, v) for t, v in zip(todo["trace_id"], vals, strict=True)]

    return run


def _z3(g: _Group, cfg: QualityConfig) -> Computer:
    from legival_core.quality.ir_extract import extract_ir
    from legival_core.quality.z3_verify import verify_ir


    def run(todo: pl.DataFrame) -> list[Row]:
        rows: list[Row] = []
        for t, text in zip(todo["trace_id"], todo["reasoning"], strict=True):
            try:
                ir = extract_ir(text)
            except Exception as e:  # noqa: BLE001 - an extractor bug on one trace must not stop the stage
                ir, err = None, f"{type(e).__name__}: {e}"
            else:
                err = "no arithmetic chain found"
            if ir is None:
                rows += [_row(t, m, g, None, "unparsed", {"reason": err}) for m in METRIC_GROUPS["z3"]]
                continue
            r = verify_ir(ir, fallback_text=text, timeout_ms=cfg.z3_timeout_ms)
            d = {"z3_status": r.status, "answer": r.answer, "tracks": len(r.tracks), "dal": r.dal,
                 "unknown_checks": r.unknown_checks}
            bad = "timeout" if r.status in ("timeout", "unknown") or r.unknown_checks else "undefined"
            for m, v in (("z3_acs", r.acs), ("z3_fas0", r.fas0), ("z3_jss", r.jss), ("z3_rcr", r.rcr)):
                rows.append(_row(t, m, g, v, "ok" if v is not None else bad, d if m == "z3_acs" else None))
        return rows

    return run


# ------------------------------------------------------------------ the stage

def _todo(store: Store, g: _Group, metric: str) -> pl.DataFrame:
    sql = (
        "SELECT t.trace_id, t.dataset, t.reasoning, t.answer_text, p.question FROM traces t "
        "JOIN problems p ON p.dataset = t.dataset AND p.problem_id = t.problem_id "
        "WHERE NOT EXISTS (SELECT 1 FROM trace_metrics x WHERE x.trace_id = t.trace_id AND x.metric = ? "
        "AND x.params = ? AND x.code_version = ? AND x.status <> 'unavailable')"
    )
    args: list[Any] = [metric, g.params, g.version]
    if g.datasets is not None:
        sql += f" AND t.dataset IN ({', '.join('?' for _ in g.datasets)})"
        args += list(g.datasets)
    return store.query(sql + " ORDER BY t.trace_id", args)


def _chunks(df: pl.DataFrame, size: int) -> Iterator[pl.DataFrame]:
    for a in range(0, df.height, size):
        yield df.slice(a, size)


def compute_quality(
    store: Store,
    metrics: Sequence[str] | None = None,
    config: QualityConfig = QualityConfig(),
    progress: Progress | None = None,
) -> QualitySummary:
    s = QualitySummary()
    groups = _groups(store, config)
    store.insert_rows("meta", [{"key": f"clarity_reference:{config.clarity_reference.ref_id}",
                                "value": config.clarity_reference.to_json()}])
    for name in resolve_groups(metrics):
        g = groups[name]
        t0 = time.perf_counter()
        todo = _todo(store, g, METRIC_GROUPS[name][0])
        s.computed[name] = 0
        s.rows[name] = 0
        if todo.height == 0:
            continue
        computer = g.load(g)
        if isinstance(computer, Unavailable):
            s.unavailable[name] = computer.reason
            detail = {"reason": computer.reason}
            rows = [_row(t, m, g, None, "unavailable", detail) for t in todo["trace_id"] for m in METRIC_GROUPS[name]]
            with store.transaction():
                s.rows[name] = store.insert_rows("trace_metrics", rows).inserted
            continue
        done = 0
        if progress:
            progress(name, 0, todo.height)
        for part in _chunks(todo, config.chunk):
            rows = computer(part)
            with store.transaction():
                _drop_unavailable(store, g, part["trace_id"].to_list())
                s.rows[name] += store.insert_rows("trace_metrics", rows).inserted
            done += part.height
            s.computed[name] = done
            if name == "z3":
                n_unparsed = sum(1 for r in rows if r["metric"] == "z3_acs" and r["status"] == "unparsed")
                s.z3_unparsed += n_unparsed
                s.z3_extracted += part.height - n_unparsed
            if progress:
                progress(name, done, todo.height)
        s.seconds[name] = round(time.perf_counter() - t0, 3)
    return s


def _drop_unavailable(store: Store, g: _Group, ids: list[str]) -> None:
    import pyarrow as pa

    store.con.register("_qids", pa.table({"trace_id": ids}))
    try:
        store.run(
            "DELETE FROM trace_metrics WHERE status = 'unavailable' AND params = ? AND code_version = ? "
            f"AND metric IN ({', '.join('?' for _ in METRIC_GROUPS[g.name])}) "
            "AND trace_id IN (SELECT trace_id FROM _qids)",
            [g.params, g.version, *METRIC_GROUPS[g.name]],
        )
    finally:
        store.con.unregister("_qids")


# ------------------------------------------------------------------ teacher-level table
