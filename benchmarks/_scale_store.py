"""The synthetic paper-scale store of `benchmarks/scale.py`: rows with the real columns and realistic
values, written through the product's own store (`Store`, its schema, `insert_arrow`).

- teachers x datasets (12 x gsm8k, math, gpqa), one trace per (teacher, problem); problems from the
  real dataset files under ../shared/data (gsm8k, MATH) and the GPQA test fixture, cycled to the
  size asked, each loaded by the dataset's registered loader (synthetic questions if absent);
- reasoning: real reasoning sentences (Punkt steps of the shared R1/gpt-oss traces, kept when they
  start a sentence and end one) drawn at random and joined by a space or a blank line, so the stored
  spans are the segmenter's own (`check_segmentation` re-segments a sample to confirm it); trace ids
  by the product's content hash; step counts lognormal (dataset and teacher factors);
- grades under each dataset's current grader key (correct by a teacher x dataset accuracy, ~2%
  unparsed, ~1% truncated); steps and step_counts under the current segmenter;
- trace_metrics: token_len (cl100k tokens of the sentences), step_len = m, lexical backtracking
  (the real cue rule on each sentence, flagged steps in `detail`), redundancy from the stored r_i
  (`step_similarity`) at the spec's tau, each under its current params and code version;
- students registered as `TransferStage.plan` registers them (real student keys); rollouts for every
  correct, complete trace at the SPEC depths `rollout_depths(m, s)` with `bins_of` bins, correctness
  rising with k/m, ~8% forced, overflow past the student's context, continuations of 1-5 sentences.

Everything is numpy/Arrow, inserted per chunk of traces (bounded memory). Nothing here is a
measurement: it only gives the benchmark a store of the paper's size.
"""

from __future__ import annotations

import glob
import json
import re
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa

from legival_core.transfer.rollout_plan import StudentConfig

ROOT = Path(__file__).resolve().parents[1]
SHARED = ROOT.parent / "shared" / "data"
GEN_VERSION = "2"
"""Part of the cached store's name: bump when the generated rows or their storage change (2: built
with `traces.reasoning` uncompressed, legival_core/store/schema.py)."""

TEACHERS = (
    "deepseek-r1-distill-qwen-1.5b", "deepseek-r1-distill-qwen-7b", "deepseek-r1-distill-qwen-14b",
    "deepseek-r1-distill-qwen-32b", "deepseek-r1-distill-llama-8b", "deepseek-r1-distill-llama-70b",
    "qwq-32b", "qwen3-8b", "qwen3-32b", "gpt-oss-20b", "gpt-oss-120b", "phi-4-reasoning",
)
DATASETS = ("gsm8k", "math", "gpqa")
PROBLEM_FILES = {
    "gsm8k": SHARED / "gsm8k" / "test.jsonl",
    "math": SHARED / "math" / "math_test_5000.jsonl",
    "gpqa": ROOT / "tests" / "fixtures" / "datasets" / "gpqa.csv",
}
STEP_FACTOR = {"gsm8k": 0.6, "math": 1.05, "gpqa": 1.35}
"""A dataset's typical step count relative to `mean_steps` (MATH/GPQA reasoning is longer)."""
DIFFICULTY = {"gsm8k": 1.0, "math": 0.92, "gpqa": 0.8}
CONTEXT = {"smollm2-135m": 8192, "qwen2.5-0.5b": 32768}
CHUNK = 4000
"""Traces generated and inserted together."""
_ENDS_WITH_WORD = re.compile(r"(?<![A-Za-z.])([a-z]{3,})[.?!]$")
"""A sentence that ends with a plain lowercase word: Punkt always breaks after it (an abbreviation,
an initial, a number or an ellipsis before the period may not), so joined sentences keep their spans."""


@dataclass(frozen=True, slots=True)
class ScaleShape:
    traces: int = 100_000
    mean_steps: float = 105.0
    seed: int = 0

    @property
    def per_cell(self) -> int:
        return max(1, self.traces // (len(TEACHERS) * len(DATASETS)))

    def name(self) -> str:
        return f"scale-v{GEN_VERSION}-t{self.traces}-m{self.mean_steps:g}-s{self.seed}"


def store_path(shape: ScaleShape, given: Path | None) -> Path:
    """`given`, else where the store of this shape is kept between runs (.cache/scale/); its folder made."""
    path = given or ROOT / ".cache" / "scale" / f"{shape.name()}.duckdb"
    path.parent.mkdir(parents=True, exist_ok=True)
    return path


def students() -> list[StudentConfig]:
    """Two students under real student keys: the shipped SmolLM2 (embedded) and a Qwen on vLLM."""
    from legival_core.run_config import student_config

    return [student_config(name="smollm2-135m"),
            student_config(name="qwen2.5-0.5b", model="Qwen/Qwen2.5-0.5B-Instruct", backend="vllm", dtype="bfloat16")]


# ----------------------------------------------------------------------------------------- sources


@dataclass(frozen=True, slots=True)
class Pool:
    sentences: np.ndarray  # object array of str
    lengths: np.ndarray
    tokens: np.ndarray  # cl100k tokens of " " + sentence
    cue: np.ndarray  # starts with a lexical backtracking cue


def sentence_pool() -> Pool:
    """Real reasoning sentences: each trace's Punkt steps that start with a capital and end with . ? or !
    and are one step on their own; a synthetic vocabulary when ../shared is absent."""
    from punkt.data import english

    from legival_core.metrics.backtracking import lexical_backtracking_steps
    from legival_core.segment import EXTRA_ABBREVIATIONS, segment, sentence_spans
    from legival_core.token_count import token_lens
    from legival_core.types import Span, Steps

    abbreviations = set(english.ABBREV_TYPES) | EXTRA_ABBREVIATIONS
    seen: set[str] = set()
    for path in sorted(glob.glob(str(SHARED / "reasoning_traces" / "*" / "*.jsonl"))):
        for line in Path(path).read_text(encoding="utf-8").splitlines():
            text = json.loads(line).get("reasoning") or ""
            for s in segment(text).sentences():
                s = s.strip()
                if (15 <= len(s) <= 400 and "\n" not in s and s[0].isascii() and s[0].isupper()
                        and (end := _ENDS_WITH_WORD.search(s)) and end.group(1) not in abbreviations
                        and s not in seen and len(sentence_spans(s)) == 1):
                    seen.add(s)
    if len(seen) < 200:
        seen |= _synthetic_sentences(4000)
    pool = sorted(seen)
    cue = [bool(lexical_backtracking_steps(Steps(s, (Span(0, len(s)),)))) for s in pool]
    return Pool(np.array(pool, dtype=object), np.array([len(s) for s in pool], np.int64),
                np.array(token_lens([" " + s for s in pool]), np.int64), np.array(cue, bool))


def _synthetic_sentences(n: int) -> set[str]:
    rng = np.random.default_rng(1)
    words = ("we", "add", "the", "two", "numbers", "then", "check", "result", "carefully", "so", "total", "is",
             "each", "box", "holds", "apples", "and", "multiply", "by", "price", "gives", "answer")
    starts = ("First", "Then", "Next", "So", "Wait", "Now", "Therefore", "Hmm", "Let me compute", "Actually")
    out = set()
    for _ in range(n):
        body = " ".join(str(w) for w in rng.choice(words, size=int(rng.integers(4, 16))))
        out.add(f"{starts[int(rng.integers(len(starts)))]}, {body} {int(rng.integers(1, 999))} units.")
    return out


def problems(dataset: str, n: int) -> list[dict[str, Any]]:
    """`n` problem rows: the dataset's real problems (its registered loader) cycled, ids suffixed on
    repeats; synthetic ones when the file is absent."""
    from legival_core.datasets.base import get_dataset

    path = PROBLEM_FILES[dataset]
    spec = get_dataset(dataset)
    base = list(next(iter(spec.loaders.values()))(path)) if path.exists() else []
    rows = []
    for i in range(n):
        if base:
            p = base[i % len(base)]
            rep = i // len(base)
            pid = p.problem_id if rep == 0 else f"{p.problem_id}-r{rep}"
            q, gold, choices = p.question, p.gold, list(p.choices)
            meta = json.dumps(dict(p.meta), sort_keys=True, separators=(",", ":")) if p.meta else None
        else:
            pid, q, gold, choices, meta = f"{dataset}-syn-{i}", f"What is {i} + {i + 1}?", str(2 * i + 1), [], None
        rows.append({"dataset": dataset, "problem_id": pid, "question": q, "gold": gold,
                     "choices": json.dumps(choices) if choices else None, "meta": meta})
    return rows


# ----------------------------------------------------------------------------------------- building


@dataclass(slots=True)
class Counts:
    problems: int = 0
    traces: int = 0
    steps: int = 0
    similarities: int = 0
    metric_rows: int = 0
    transfer_traces: int = 0
    rollouts: int = 0
    reasoning_chars: int = 0
    seconds: float = 0.0

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


def build_store(path: Path, shape: ScaleShape, progress: Any = None) -> Counts:
    """Fill a new store at `path` (which must not exist)."""
    from legival_core.run_config import Efficiency
    from legival_core.store import Store
    from legival_core.transfer.rollout_plan import PROMPT_VERSION
    from legival_core.types import canonical_json

    if path.exists():
        raise FileExistsError(path)
    t0 = time.perf_counter()
    pool = sentence_pool()
    n = shape.per_cell
    probs = {d: problems(d, n) for d in DATASETS}
    conts = _continuations(pool, np.random.default_rng(shape.seed + 7))
    c = Counts()
    eff = Efficiency()
    with Store(path) as store:
        with store.transaction():
            for d in DATASETS:
                c.problems += store.insert_arrow("problems", pa.Table.from_pylist(probs[d])).inserted
            store.insert_rows("students", [{
                "student_key": s.student_key, "name": s.name, "model": s.model,
                "decoding": canonical_json(s.decoding()), "prompt_version": PROMPT_VERSION, "profile": s.profile,
            } for s in students()])
        total = n * len(TEACHERS) * len(DATASETS)
        for lo in range(0, total, CHUNK):
            tables, n_transfer = _chunk(lo, min(total, lo + CHUNK), shape, pool, probs, conts, eff)
            with store.transaction():
                for name, table in tables:
                    store.insert_arrow(name, table)
            for name, table in tables:
                if name == "traces":
                    c.traces += table.num_rows
                    c.reasoning_chars += int(sum(len(x) for x in table.column("reasoning").to_pylist()))
                elif name == "steps":
                    c.steps += table.num_rows
                elif name == "step_similarity":
                    c.similarities += table.num_rows
                elif name == "trace_metrics":
                    c.metric_rows += table.num_rows
                elif name == "rollouts":
                    c.rollouts += table.num_rows
            c.transfer_traces += n_transfer
            if progress is not None:
                progress(min(total, lo + CHUNK), total, c)
    c.seconds = round(time.perf_counter() - t0, 1)
    return c


def _continuations(pool: Pool, rng: np.random.Generator, n: int = 20_000) -> tuple[np.ndarray, np.ndarray]:
    """A pool of student continuations (1-5 reasoning sentences) and their token counts."""
    texts, toks = [], []
    for _ in range(n):
        j = rng.integers(0, len(pool.sentences), size=int(rng.integers(1, 6)))
        texts.append(" ".join(pool.sentences[j]))
        toks.append(int(pool.tokens[j].sum()) + 8)
    return np.array(texts, dtype=object), np.array(toks, np.int64)


def _chunk(lo: int, hi: int, shape: ScaleShape, pool: Pool, probs: dict[str, list[dict[str, Any]]],
           conts: tuple[np.ndarray, np.ndarray], eff: Any) -> tuple[list[tuple[str, pa.Table]], int]:
    from legival_core.datasets.base import grader_key
    from legival_core.metrics.backtracking import BACKTRACKING
    from legival_core.metrics.redundancy import REDUNDANCY
    from legival_core.metrics.step_len import STEP_LEN
    from legival_core.metrics.token_len import TOKEN_LEN
    from legival_core.segment import SEGMENTER_VERSION
    from legival_core.token_count import ENCODING_NAME
    from legival_core.types import canonical_json, trace_id_of

    rng = np.random.default_rng([shape.seed, lo])
    n, n_d = shape.per_cell, len(DATASETS)
    gi = np.arange(lo, hi)
    ti, di, pi = gi // (n_d * n), (gi // n) % n_d, gi % n
    size = hi - lo
    # step counts: lognormal around the dataset's typical length, longer for some teachers
    tfac = 0.75 + 0.5 * ((np.arange(len(TEACHERS)) * 7) % len(TEACHERS)) / (len(TEACHERS) - 1)
    dfac = np.array([STEP_FACTOR[d] for d in DATASETS])
    sigma = 0.5
    med = shape.mean_steps * dfac[di] * tfac[ti] / np.exp(sigma**2 / 2)
    m = np.clip(np.round(med * rng.lognormal(0.0, sigma, size)), 1, 600).astype(np.int64)
    skill = 0.86 + 0.12 * np.arange(len(TEACHERS)) / (len(TEACHERS) - 1)
    acc = skill[ti] * np.array([DIFFICULTY[d] for d in DATASETS])[di]
    truncated = rng.random(size) < 0.01
    unparsed = ~truncated & (rng.random(size) < 0.02)
    correct = ~truncated & ~unparsed & (rng.random(size) < acc)
    # reasoning: m pool sentences joined by " " or a blank line; spans are the sentences
    total = int(m.sum())
    starts = np.concatenate([[0], np.cumsum(m)[:-1]])
    owner = np.repeat(np.arange(size), m)
    pos = np.arange(total) - starts[owner]
    idx = rng.integers(0, len(pool.sentences), size=total)
    seplen = np.where(pos == 0, 0, np.where(rng.random(total) < 0.3, 2, 1))
    length = pool.lengths[idx]
    end_cum = np.cumsum(seplen + length)
    base = np.concatenate([[0], end_cum[np.cumsum(m) - 1][:-1]])
    end = end_cum - base[owner]
    start = end - length
    pieces = np.empty(2 * total, dtype=object)
    pieces[0::2] = np.array(["", " ", "\n\n"], dtype=object)[seplen]
    pieces[1::2] = pool.sentences[idx]
    bounds = np.concatenate([[0], 2 * np.cumsum(m)])
    reasoning = ["".join(pieces[bounds[i]:bounds[i + 1]]) for i in range(size)]
    teacher = [TEACHERS[i] for i in ti]
    dataset = [DATASETS[i] for i in di]
    prob = [probs[dataset[i]][pi[i]] for i in range(size)]
    pid = [p["problem_id"] for p in prob]
    wrong = [_wrong(p["gold"], dataset[i], int(gi[i])) for i, p in enumerate(prob)]
    answer = [_answer_text(p["gold"] if correct[i] else wrong[i], dataset[i]) if not truncated[i] else ""
              for i, p in enumerate(prob)]
    answer = [a if not unparsed[i] else "I am not sure." for i, a in enumerate(answer)]
    tid = [trace_id_of(teacher[i], dataset[i], pid[i], reasoning[i], answer[i]) for i in range(size)]
    tid_arr = pa.array(tid, pa.string())
    line = (pi + 1).astype(np.int32)
    traces = pa.table({
        "trace_id": tid_arr, "teacher": teacher, "dataset": dataset, "problem_id": pid, "reasoning": reasoning,
        "answer_text": answer, "truncated": truncated, "source_correct": pa.array(correct, mask=rng.random(size) < 0.5),
        "source_file": [f"{t}.{d}.jsonl" for t, d in zip(teacher, dataset, strict=True)], "source_line": line,
        "provenance": [canonical_json({"file": f"{t}.{d}.jsonl", "line": int(x)})
                       for t, d, x in zip(teacher, dataset, line, strict=True)],
    })
    status = np.where(truncated, "truncated", np.where(unparsed, "unparsed", "ok"))
    extracted = [None if unparsed[i] or truncated[i] else (p["gold"] if correct[i] else wrong[i])
                 for i, p in enumerate(prob)]
    grades = pa.table({
        "trace_id": tid_arr, "grader": [grader_key(d) for d in dataset], "extracted": pa.array(extracted, pa.string()),
        "correct": correct, "status": status, "groups_correct": pa.nulls(size, pa.int32()),
    })
    seg = SEGMENTER_VERSION
    steps = pa.table({
        "trace_id": tid_arr.take(pa.array(owner)), "segmenter": pa.array([seg]).take(pa.array(np.zeros(total, np.int64))),
        "idx": (pos + 1).astype(np.int32), "start_char": start.astype(np.int32), "end_char": end.astype(np.int32),
    })
    step_counts = pa.table({"trace_id": tid_arr, "segmenter": [seg] * size, "m": m.astype(np.int32)})
    # r_i for steps 2..m: near-duplicates more common for some teachers; redundancy at the spec's tau
    later = pos >= 1
    r = np.clip(rng.beta(2.0 + 3.0 * tfac[ti][owner], 2.5), 0.0, 1.0)[later]
    sim_owner = owner[later]
    sims = pa.table({
        "trace_id": tid_arr.take(pa.array(sim_owner)), "model": [eff.model] * len(r), "segmenter": [seg] * len(r),
        "idx": (pos[later] + 1).astype(np.int32), "max_prev_cos": r,
    })
    over = np.bincount(sim_owner, weights=(r > eff.tau), minlength=size)
    redundancy = np.where(m >= 2, over / np.maximum(m - 1, 1), 0.0)
    tok = np.bincount(owner, weights=pool.tokens[idx], minlength=size) - 1
    flags = pool.cue[idx]
    flagged = np.bincount(owner, weights=flags, minlength=size)
    detail = [canonical_json({"steps": (pos[starts[i]:starts[i] + m[i]][flags[starts[i]:starts[i] + m[i]]] + 1).tolist()})
              for i in range(size)]
    metric_tables = []
    for tm, values, method, det in (
        (TOKEN_LEN, tok, ENCODING_NAME, None),
        (STEP_LEN, m.astype(np.float64), "punkt", None),
        (REDUNDANCY, redundancy, eff.model, None),
        (BACKTRACKING, flagged / m, "lexical", detail),
    ):
        metric_tables.append(pa.table({
            "trace_id": tid_arr, "metric": [tm.name] * size, "params": [canonical_json(tm.params(eff))] * size,
            "code_version": [tm.version] * size, "value": values.astype(np.float64), "method": [method] * size,
            "status": ["ok"] * size, "detail": pa.array(det if det is not None else [None] * size, pa.string()),
        }))
    transfer = np.flatnonzero(correct & ~truncated & (m >= 1))
    out: list[tuple[str, pa.Table]] = [
        ("traces", traces), ("grades", grades), ("steps", steps), ("step_counts", step_counts),
        ("step_similarity", sims), *[("trace_metrics", t) for t in metric_tables],
    ]
    gold_arr = np.array([p["gold"] for p in prob], dtype=object)
    wrong_arr = np.array(wrong, dtype=object)
    for si, s in enumerate(students()):
        out.append(("rollouts", _rollouts(rng, s, si, transfer, m, tok, ti, tid_arr, gold_arr, wrong_arr, conts)))
    return out, len(transfer)


def _rollouts(rng: np.random.Generator, s: StudentConfig, si: int, transfer: np.ndarray, m: np.ndarray,
              tok: np.ndarray, ti: np.ndarray, tid: pa.Array, gold: np.ndarray, wrong: np.ndarray,
              conts: tuple[np.ndarray, np.ndarray]) -> pa.Table:
    """The SPEC depths of every transfer trace, with outcomes that rise with k/m."""
    from legival_core.transfer.utility import bins_of

    step = s.step_interval
    mt = m[transfer]
    n_k = -(-mt // step) + 1  # |range(0, m, s)| + the full trace
    rows = np.repeat(transfer, n_k)
    first = np.concatenate([[0], np.cumsum(n_k)[:-1]])
    j = np.arange(len(rows)) - np.repeat(first, n_k)
    mm = m[rows]
    k = np.where(j == n_k.repeat(n_k) - 1, mm, j * step)
    frac = k / mm
    legible = 0.3 + 0.5 * ((ti[rows] * 5) % 12) / 11
    p_ok = np.clip(0.25 + 0.1 * si + legible * frac**1.5, 0.0, 0.98)
    ok = rng.random(len(k)) < p_ok
    prompt = (220 + tok[rows] * frac).astype(np.int64)
    overflow = prompt > CONTEXT.get(s.name, 8192) - 64
    forced = ~overflow & (rng.random(len(k)) < 0.08)
    unparsed = forced & (rng.random(len(k)) < 0.3)
    correct = ok & ~unparsed
    ci = rng.integers(0, len(conts[0]), size=len(k))
    completion = np.where(overflow, 0, conts[1][ci] + np.where(forced, 40, 0))
    cached = np.where(j == 0, 0, np.concatenate([[0], prompt[:-1]]))
    cached = np.where(overflow, 0, np.minimum(cached, prompt))
    answer = np.where(correct, gold[rows], wrong[rows])
    return pa.table({
        "trace_id": tid.take(pa.array(rows)), "student_key": [s.student_key] * len(k), "k": k.astype(np.int32),
        "sample": np.zeros(len(k), np.int32), "m": mm.astype(np.int32), "bin": bins_of(k, mm, s.n_bins).astype(np.int32),
        "status": np.where(overflow, "overflow", "ok"), "correct": pa.array(correct, mask=overflow),
        "forced": forced, "extracted": pa.array(answer.tolist(), pa.string(), mask=overflow | unparsed),
        "grade_status": pa.array(np.where(unparsed, "unparsed", "ok").tolist(), pa.string(), mask=overflow),
        "continuation": pa.array(np.where(overflow, "", conts[0][ci]).tolist(), pa.string()),
        "forced_continuation": pa.array(np.where(forced, "The answer is \\boxed{", None).tolist(), pa.string()),
        "prompt_tokens": prompt.astype(np.int32), "completion_tokens": completion.astype(np.int32),
        "prefill_computed": (np.where(overflow, 0, prompt - cached)).astype(np.int32),
        "prefill_cached": cached.astype(np.int32),
        "finish_reason": np.where(overflow, "overflow", np.where(forced, "length", "rule")),
    })


def _answer_text(answer: str, dataset: str) -> str:
    return f"The correct answer is \\boxed{{{answer}}}." if dataset == "gpqa" else f"The answer is \\boxed{{{answer}}}."


def _wrong(gold: str, dataset: str, i: int) -> str:
    if dataset == "gpqa":
        letters = [x for x in "ABCD" if x != gold.strip().upper()]
        return letters[i % len(letters)]
    try:
        return str(int(gold) + 1 + i % 7)
    except ValueError:
        return f"{gold}+{1 + i % 7}"


def check_segmentation(path: Path, sample: int = 200) -> tuple[int, int]:
    """Re-segment `sample` stored traces with the product's segmenter: (traces whose stored spans are
    exactly its spans, traces checked)."""
    from legival_core.segment import SEGMENTER_VERSION, sentence_spans
    from legival_core.store import Store
    from legival_core.store import planner as reads
    from legival_core.store import report as rreads

    with Store(path, read_only=True) as store:
        ids = rreads.trace_teachers(store)["trace_id"].sort().to_list()
        ids = ids[:: max(1, len(ids) // sample)][:sample]
        inputs = reads.judge_inputs(store, ids)  # trace_id -> (dataset, reasoning, question)
        spans = reads.step_spans(store, ids, SEGMENTER_VERSION)
    same = sum(1 for t in ids if [(s.start, s.end) for s in sentence_spans(inputs[t][1])] == spans[t])
    return same, len(ids)
