"""Logical verification of a reasoning trace with Z3 over the arithmetic IR (gCoT paper, "Logical
Verification (Z3)": ACS, FAS0, JSS, RCR with shortcut removal).

Semantics follow the authors' code, sanchezgt/md-eval-cot
`characterization/automatic/z3-based/compute_z3_metrics.py` (blob seen at commit d9bb4c77; cited below
as *[repo]*), re-implemented here. Their published numbers
(`characterization/automatic/z3-based/human_eval_gsm8k_acs.json`, 80 records with `S`, `tracks`,
`acs`, `ear`, `acs_t`; cited as *[published]*) were produced by a slightly different revision; the two
differ in exactly two places, selected by `Dialect`:

- ``"published"`` (default; reproduces all 80 published `S` listings, `tracks`, `acs`, `ear`, `acs_t`):
  a `set_expr` whose target is given as ``"lhs": {"var": ...}`` is ignored, and EAR negates each
  assertion while keeping it.
- ``"repo"``: [repo] as written: the ``lhs`` target is accepted, and EAR both skips and negates the
  assertion (so the negation never reaches the solver and EAR measures whether the *other* constraints
  are already inconsistent; on a consistent IR it is always 0, which contradicts the 66/80 published
  EAR = 1 values).

Compilation ([repo] `compile_ir`; here `z3_compile.compile_ir`): every declared variable starts at SSA
version 0 (``name@0``), an undeclared one is an `Int` at version 0 on first read. `set`, `update`
and `set_expr` create ``name@k+1``; each step is added with ``assert_and_track(phi, Bool(track))``.
Constants follow `_to_num`: a Real target (or, in `set_expr`/asserts, any Real variable in the IR, or a non-integer
constant in the assert) makes constants Python floats, otherwise integral values are ints; the formula
is then built with Z3's Python operators, so ``Int / Int`` is integer division and ``Int == 2.5`` is
false. Two quirks are reproduced on purpose: `set_expr` advances the target *before* reading its
operands (``x = x + 1`` compiles to ``x@1 == x@1 + 1``, unsatisfiable), and a step that fails part-way
may already have advanced its target (see `z3_ir.SkippedStep`). Nested operands: [repo] raises on
them and drops the step (after advancing a `set_expr` target); that is the default here too (reported in
`Z3Result.skipped_steps`). ``allow_nested=True`` compiles them instead, constants inside following the
same rule. This matters for one published IR (record 69, a `set_expr` with an ``lhs`` target, so only
in the ``"repo"`` dialect).

Deviations (none affects the published values): every check runs under a per-call timeout
(``solver.set("timeout", ms)``) in a fresh `z3.Context`; a check that returns *unknown* makes the metric
that needs it `None` (the authors count unknown as "not unsat" in FAS0/EAR/RCR), counted in
`Z3Result.unknown_checks`.
"""

from __future__ import annotations

import math
import re
from collections import deque
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal

import z3

from legival_core.quality.z3_compile import Check, Compiled, Dialect, check, compile_ir
from legival_core.quality.z3_ir import (
    DEFAULT_TIMEOUT_MS,
    IR,
    IRValidationError,
    parse_ir,
    step_to_dict,
)

Status = Literal["sat", "unsat", "timeout", "unknown", "error", "empty"]
_ANSWER_KEYS = ("gcot", "answer", "pred", "prediction", "final", "final_answer")


@dataclass(frozen=True, slots=True)
class Z3Result:
    """Metrics of one IR. A metric is `None` where the authors' definition leaves it undefined.

    `status` is the outcome of checking the whole IR ("empty": no constraint could be compiled).
    `unsat_core` lists the tracks in Z3's (non-minimised) core of that check, `justification` those in
    the core of the FAS0 check (the JSS set), `redundant_tracks` the steps counted by RCR, and
    `entailed_asserts` the assertions counted by EAR. `constraints` is the solver's assertion listing,
    the same text as the published `S` field.
    """

    acs: float | None
    fas0: float | None
    jss: float | None
    rcr: float | None
    ear: float | None
    acs_t: float | None
    status: Status
    answer: int | None
    dal: int
    unsat_core: tuple[str, ...] = ()
    tracks: tuple[str, ...] = ()
    shortcut_tracks: tuple[str, ...] = ()
    justification: tuple[str, ...] = ()
    redundant_tracks: tuple[str, ...] = ()
    entailed_asserts: tuple[str, ...] = ()
    skipped_steps: tuple[str, ...] = ()
    unknown_checks: int = 0
    constraints: str = "[]"
    dialect: Dialect = "published"


# --------------------------------------------------------------------------- answer and shortcuts


def _step_views(ir: IR) -> list[dict[str, Any]]:
    """Steps as published-format dicts: the authors' answer/shortcut logic reads raw steps."""
    return [step_to_dict(s) for s in ir.steps]


def _side(d: Mapping[str, Any], key: str) -> Mapping[str, Any]:
    v = d.get(key)
    return v if isinstance(v, Mapping) else {}


def _integral(value: Any) -> int | None:
    try:
        f = float(value)
    except (TypeError, ValueError, OverflowError):
        return None
    return int(f) if math.isfinite(f) and f.is_integer() else None


def answer_from_text(text: str) -> int | None:
    """[repo] `extract_predicted_answer`, text part: ``#### N``, else the last number after an
    answer-ish keyword (answer/final answer/total/thus/therefore/so, case-insensitive, also inside words
    as in their regex), else the last number on the last three non-empty lines."""
    m = re.findall(r"####\s*(-?\d+)", text)
    if m:
        return _int(m[-1])
    m = re.findall(r"(?:answer(?: is)?|final answer|total|thus|therefore|so)\D*(-?\d+)\b", text, flags=re.I)
    if m:
        return _int(m[-1])
    lines = [ln.strip() for ln in text.splitlines() if ln.strip()]
    for ln in reversed(lines[-3:]):
        m = re.findall(r"(-?\d+)\b", ln)
        if m:
            return _int(m[-1])
    return None


def _int(digits: str) -> int | None:
    """int(digits), or None for more digits than Python converts (sys.get_int_max_str_digits)."""
    try:
        return int(digits)
    except ValueError:
        return None


def predicted_answer(ir: IR, fallback_text: str | None = None) -> int | None:
    """[repo] `extract_predicted_answer`: the first ``assert_eq`` pairing ``final_answer`` with an
    integral constant (either side), else `answer_from_text(fallback_text)`."""
    for st in _step_views(ir):
        if st.get("op") != "assert_eq":
            continue
        lhs, rhs = _side(st, "lhs"), _side(st, "rhs")
        for a, b in ((lhs, rhs), (rhs, lhs)):
            if a.get("var") == "final_answer" and b.get("const") is not None:
                n = _integral(b["const"])
                if n is not None:
                    return n
    return answer_from_text(fallback_text) if fallback_text else None


def bridge_variables(ir: IR) -> frozenset[str]:
    """[repo] `find_bridge_vars`: variables connected to ``final_answer`` in the undirected graph whose
    edges are ``assert_eq var == var`` steps and the top-level operands of a ``set_expr`` whose
    ``"var"`` is ``final_answer``. Just ``{final_answer}`` when it has no edge."""
    graph: dict[str, set[str]] = {}

    def link(a: str, b: str) -> None:
        graph.setdefault(a, set()).add(b)
        graph.setdefault(b, set()).add(a)

    views = _step_views(ir)
    for st in views:
        if st.get("op") == "assert_eq":
            lv, rv = _side(st, "lhs").get("var"), _side(st, "rhs").get("var")
            if lv and rv:
                link(lv, rv)
    for st in views:
        if st.get("op") == "set_expr" and st.get("var") == "final_answer":
            expr = _side(st, "expr")
            for key in ("left", "right"):
                v = _side(expr, key).get("var")
                if v:
                    link("final_answer", v)
    if "final_answer" not in graph:
        return frozenset({"final_answer"})
    seen = {"final_answer"}
    queue = deque(["final_answer"])
    while queue:
        for w in graph.get(queue.popleft(), ()):
            if w not in seen:
                seen.add(w)
                queue.append(w)
    return frozenset(seen)


def detect_shortcuts(ir: IR, answer: int | None) -> frozenset[str]:
    """[repo] `detect_shortcuts`: tracks of ``assert_eq`` steps equating a bridge variable with the
    predicted answer as a constant, i.e. steps that state the answer instead of deriving it. They are
    removed before FAS0, JSS and RCR. Empty when there is no predicted answer."""
    if answer is None:
        return frozenset()
    bridges = bridge_variables(ir)

    def is_answer(side: Mapping[str, Any]) -> bool:
        return side.get("const") is not None and _integral(side["const"]) == int(answer)

    found: set[str] = set()
    for st in _step_views(ir):
        if st.get("op") != "assert_eq":
            continue
        lhs, rhs = _side(st, "lhs"), _side(st, "rhs")
        if (
            (lhs.get("var") in bridges and is_answer(rhs)) or (rhs.get("var") in bridges and is_answer(lhs))
        ) and st.get("track"):
            found.add(st["track"])
    return frozenset(found)


def _assert_tracks(ir: IR) -> list[str]:
    """[repo] `list_assert_tracks`, over raw steps (skipped ones included)."""
    return [
        st["track"]
        for st in _step_views(ir)
        if st.get("op") in ("assert_eq", "assert_ge", "assert_le") and st.get("track")
    ]


# --------------------------------------------------------------------------- metrics


def verify_ir(
    ir: IR,
    *,
    answer: int | None = None,
    fallback_text: str | None = None,
    timeout_ms: int = DEFAULT_TIMEOUT_MS,
    dialect: Dialect = "published",
    allow_nested: bool = False,
) -> Z3Result:
    """Compute the gCoT Z3 metrics of one IR ([repo] `process_rows`).

    Definitions (T = tracks compiled, in step order, duplicates kept; "unsat core" is Z3's core, not
    minimised, so values can depend on the Z3 version; Z3 5.x reproduces the published 80):

    - ACS, Aggregate Consistency Score ([repo] `compute_acs`): 1 if the tracked constraints are
      satisfiable, else ``1 - |{t in T : t in core}| / |T|``, clamped to [0, 1]; None without steps.
    - EAR, entailed-assertion ratio ([repo] `compute_ear`; dialects differ, see module doc): share of
      assertion steps whose negation, with all other steps kept, is unsatisfiable; None without asserts.
    - ACS_T: ``acs * ear`` (not in [repo]; inferred from [published], where it holds for all 80).
    - answer: `answer` if given, else `predicted_answer(ir, fallback_text)`.
      Shortcuts: `detect_shortcuts`; DAL = 1 if any shortcut was found, else 0.
    - FAS0, Final Answer Soundness ([repo] `compute_fas0`): with shortcuts removed, 1 if the remaining
      constraints plus ``final_answer != answer`` are unsatisfiable (the steps force the answer), else 0;
      None without an answer or without a declared ``final_answer``.
    - JSS, Justification Set Size ([repo] `compute_jss`): in that FAS0 check, when unsat,
      ``|{t in T' : t in core}| / |T'|`` with T' the non-shortcut tracks; None otherwise.
    - RCR, Redundant Constraint Ratio ([repo] `compute_rcr`): share of t in T' such that removing t
      (besides the shortcuts) still forces the answer; None without an answer or with T' empty. As in
      [repo], it is 0 (not None) when ``final_answer`` is not declared.
    """
    check_timeout(timeout_ms)
    ctx = z3.Context()
    unknown = 0

    def compile_(
        skip: frozenset[str] = frozenset(), negate: frozenset[str] = frozenset()
    ) -> Compiled | None:
        return compile_ir(
            ir,
            ctx,
            dialect=dialect,
            skip=skip,
            negate=negate,
            timeout_ms=timeout_ms,
            allow_nested=allow_nested,
        )

    main = compile_()
    status: Status = "empty"
    acs: float | None = None
    core: tuple[str, ...] = ()
    if main is not None and main.tracks:
        chk = check(main.solver)
        status = chk.result
        if chk.result == "sat":
            acs = 1.0
        elif chk.result == "unsat":
            k = sum(1 for t in main.tracks if t in chk.core)
            acs = max(0.0, min(1.0, 1.0 - k / max(1, len(main.tracks))))
            core = tuple(t for t in dict.fromkeys(main.tracks) if t in chk.core)
        else:
            unknown += 1

    ear: float | None = None
    entailed: list[str] = []
    asserts = _assert_tracks(ir)
    if asserts and main is not None:
        results: list[Check] = []
        for t in asserts:
            comp = compile_(skip=frozenset({t}) if dialect == "repo" else frozenset(), negate=frozenset({t}))
            assert comp is not None
            results.append(check(comp.solver))
            if results[-1].result == "unsat":
                entailed.append(t)
        bad = sum(1 for r in results if r.result in ("timeout", "unknown", "error"))
        unknown += bad
        ear = None if bad else len(entailed) / len(results)
    acs_t = None if acs is None or ear is None else acs * ear

    ans = answer if answer is not None else predicted_answer(ir, fallback_text)
    shortcuts = detect_shortcuts(ir, ans)
    fas0: float | None = None
    jss: float | None = None
    rcr: float | None = None
    justification: tuple[str, ...] = ()
    redundant: list[str] = []
    base = compile_(skip=shortcuts) if ans is not None else None
    if base is not None and base.final is not None:
        base.solver.add(base.final != int(ans))  # type: ignore[arg-type]
        chk = check(base.solver)
        if chk.result in ("sat", "unsat"):
            fas0 = 1.0 if chk.result == "unsat" else 0.0
            if chk.result == "unsat" and base.tracks:
                jss = sum(1 for t in base.tracks if t in chk.core) / max(1, len(base.tracks))
                justification = tuple(t for t in dict.fromkeys(base.tracks) if t in chk.core)
        else:
            unknown += 1
    if base is not None and base.tracks:
        outcome: dict[str, bool | None] = {}
        for t in dict.fromkeys(base.tracks):
            comp = compile_(skip=shortcuts | {t})
            assert comp is not None
            if comp.final is None:
                outcome[t] = False
                continue
            comp.solver.add(comp.final != int(ans))  # type: ignore[arg-type]
            r = check(comp.solver)
            outcome[t] = None if r.result not in ("sat", "unsat") else r.result == "unsat"
        bad = sum(1 for v in outcome.values() if v is None)
        unknown += bad
        if not bad:
            redundant = [t for t in base.tracks if outcome[t]]
            rcr = len(redundant) / len(base.tracks)

    return Z3Result(
        acs=acs,
        fas0=fas0,
        jss=jss,
        rcr=rcr,
        ear=ear,
        acs_t=acs_t,
        status=status,
        answer=ans,
        dal=1 if shortcuts else 0,
        unsat_core=core,
        tracks=tuple(main.tracks) if main is not None else (),
        shortcut_tracks=tuple(sorted(shortcuts)),
        justification=justification,
        redundant_tracks=tuple(dict.fromkeys(redundant)),
        entailed_asserts=tuple(entailed),
        skipped_steps=tuple(main.skipped) if main is not None else (),
        unknown_checks=unknown,
        constraints=str(main.solver.assertions()) if main is not None else "[]",
        dialect=dialect,
    )


def sound_only(r: Z3Result) -> tuple[float | None, float | None]:
    """(JSS, RCR) as the paper defines them: they measure the justification of a SOUND answer, so they
    exist only when FAS0 = 1 and are None otherwise (a mean is then taken over the FAS0 = 1 traces).
    `verify_ir` keeps [repo]'s values, where RCR is also computed on an unsound trace (there always 0)."""
    return (r.jss, r.rcr) if r.fas0 == 1.0 else (None, None)


# --------------------------------------------------------------------------- records


def record_text(record: Mapping[str, Any]) -> str:
    """The text the authors search for an answer when the IR states none: string fields
    gcot/answer/pred/prediction/final/final_answer of `record["data"]`, then of the record itself."""
    texts: list[str] = []
    data = record.get("data")
    for source in (data if isinstance(data, Mapping) else {}, record):
        for key in _ANSWER_KEYS:
            v = source.get(key)
            if isinstance(v, str):
                texts.append(v)
    return "\n".join(texts)


_METRIC_FIELDS = ("acs", "ear", "acs_t", "fas0", "jss", "rcr", "dal")


def check_timeout(timeout_ms: int) -> None:
    """Z3 reads a time limit of 0 as "no limit", so a nonlinear IR could run forever: refuse it."""
    if isinstance(timeout_ms, bool) or not isinstance(timeout_ms, int) or timeout_ms < 1:
        raise ValueError(f"timeout_ms must be a positive number of milliseconds, not {timeout_ms!r}")


def verify_record(
    record: Mapping[str, Any],
    *,
    timeout_ms: int = DEFAULT_TIMEOUT_MS,
    dialect: Dialect = "published",
    strict: bool = False,
) -> dict[str, Any]:
    """One record of `verify_records`; never raises on a bad record: an IR that cannot be read gets
    ``z3_status="invalid_ir"``, any other failure on it ``z3_status="error"``, both with `z3_error`."""
    check_timeout(timeout_ms)
    out = dict(record)
    raw = record.get("ir")
    try:
        if raw is None:
            raise IRValidationError("ir", "record has no 'ir' field")
        ir = parse_ir(raw, lenient=not strict)
    except IRValidationError as e:
        out.update(dict.fromkeys(_METRIC_FIELDS))
        out.update(z3_status="invalid_ir", z3_error=str(e))
        return out
    except RecursionError:
        out.update(dict.fromkeys(_METRIC_FIELDS))
        out.update(z3_status="invalid_ir", z3_error="ir: nested too deeply to read")
        return out
    try:
        res = verify_ir(ir, fallback_text=record_text(record), timeout_ms=timeout_ms, dialect=dialect)
    except Exception as e:  # one record's failure (a Z3 or arithmetic error) must not stop a batch
        out.update(dict.fromkeys(_METRIC_FIELDS))
        out.update(z3_status="error", z3_error=f"{type(e).__name__}: {e}"[:500])
        return out
    out.update(
        acs=res.acs,
        ear=res.ear,
        acs_t=res.acs_t,
        fas0=res.fas0,
        jss=res.jss,
        rcr=res.rcr,
        dal=res.dal,
        z3_status=res.status,
        z3_answer=res.answer,
        z3_unsat_core=list(res.unsat_core),
        z3_shortcuts=list(res.shortcut_tracks),
        z3_skipped_steps=list(res.skipped_steps),
    )
    return out


def verify_records(
    records: Iterable[Mapping[str, Any]],
    *,
    timeout_ms: int = DEFAULT_TIMEOUT_MS,
    dialect: Dialect = "published",
    strict: bool = False,
) -> Iterator[dict[str, Any]]:
    """For ``legival z3 FILE.jsonl --out OUT.jsonl``: yield each record with `acs`, `ear`, `acs_t`,
    `fas0`, `jss`, `rcr`, `dal` (None where undefined), `z3_status` and `z3_*` diagnostics added; other
    fields pass through. A record without `ir`, or whose IR cannot be read, gets
    ``z3_status="invalid_ir"`` and a `z3_error` message. Steps are read leniently (as the authors'
    compiler does) unless `strict`, in which case any malformed step makes the IR invalid. A record on
    which verification fails otherwise gets ``z3_status="error"`` and the reason in `z3_error`; the
    other records are verified as usual. A `timeout_ms` below 1 raises ValueError at once."""
    check_timeout(timeout_ms)
    return (verify_record(record, timeout_ms=timeout_ms, dialect=dialect, strict=strict) for record in records)


def verify_published_ir(obj: Mapping[str, Any], **kwargs: Any) -> Z3Result:
    """Convenience: `verify_ir(parse_ir(obj, lenient=True), **kwargs)`."""
    return verify_ir(parse_ir(obj, lenient=True), **kwargs)


__all__: Sequence[str] = (
    "DEFAULT_TIMEOUT_MS",
    "Dialect",
    "Status",
    "Z3Result",
    "answer_from_text",
    "bridge_variables",
    "check_timeout",
    "detect_shortcuts",
    "predicted_answer",
    "record_text",
    "sound_only",
    "verify_ir",
    "verify_published_ir",
    "verify_record",
    "verify_records",
)
