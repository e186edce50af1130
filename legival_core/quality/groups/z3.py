"""Z3 logical verification (gCoT consistency): the trace's arithmetic chain extracted as an IR
(`quality.ir_extract`) and checked by Z3 (`quality.z3_verify`). It applies to GSM8K only (the
extractor reads GSM8K-style arithmetic); a trace without an extractable IR gets 'unparsed' rows."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from legival_core.metrics.base import metric
from legival_core.quality.group import (
    SECTION,
    Computer,
    Group,
    QualityConfig,
    QualityGroup,
    QualityMetric,
    QualityUnit,
    Row,
    register_quality_group,
    row,
)

Z3_VERSION = "z3-extract-2"
"""z3-extract-2: JSS and RCR only where FAS0 = 1 (`z3_verify.sound_only`), 'undefined' elsewhere."""

METRICS = (
    QualityMetric("z3_acs", "fraction", "higher", "Z3 answer-consistency score of the extracted IR", "consistency"),
    QualityMetric("z3_fas0", "fraction", "higher", "Z3 final-answer support without shortcuts", "consistency"),
    QualityMetric("z3_jss", "fraction", "higher", "Z3 justification set size (FAS0 = 1 traces only)"),
    QualityMetric("z3_rcr", "fraction", "lower", "Z3 redundant constraint ratio (FAS0 = 1 traces only)"),
)


def key(cfg: QualityConfig) -> tuple[dict[str, Any], str]:
    return {"extractor": "deterministic", "timeout_ms": cfg.z3_timeout_ms}, "z3+ir_extract"


def load(g: Group, cfg: QualityConfig) -> Computer:
    # z3 (the z3-solver package) is a heavy optional dependency: imported when the group runs, so the
    # registry's scan of the groups works where it is absent (the vLLM worker's environment)
    from legival_core.quality import z3_verify
    from legival_core.quality.ir_extract import extract_ir

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
                r = z3_verify.verify_ir(ir, fallback_text=u.reasoning, timeout_ms=cfg.z3_timeout_ms)
            except Exception as e:  # noqa: BLE001 - one bad IR must not stop its chunk
                rows += [row(t, m, g, None, "error", {"reason": f"{type(e).__name__}: {e}"}) for m in g.metrics]
                continue
            d = {"z3_status": r.status, "answer": r.answer, "tracks": len(r.tracks), "dal": r.dal,
                 "unknown_checks": r.unknown_checks}
            bad = "timeout" if r.status in ("timeout", "unknown") or r.unknown_checks else "undefined"
            jss, rcr = z3_verify.sound_only(r)
            unsound = None if r.fas0 == 1.0 else {"reason": "defined only when FAS0 = 1", "fas0": r.fas0}
            for m, v in (("z3_acs", r.acs), ("z3_fas0", r.fas0), ("z3_jss", jss), ("z3_rcr", rcr)):
                if m in ("z3_jss", "z3_rcr") and unsound:
                    rows.append(row(t, m, g, None, "undefined" if r.fas0 == 0.0 else bad, unsound))
                    continue
                rows.append(row(t, m, g, v, "ok" if v is not None else bad, d if m == "z3_acs" else None))
        return rows

    return run


Z3 = register_quality_group(QualityGroup(
    "z3", METRICS, Z3_VERSION, key, load, order=19, datasets=("gsm8k",), cpu_bound=True, extraction=True,
    description="Z3 verification of the extracted arithmetic IR (GSM8K)"))

metric("z3_extraction_rate", unit="fraction", direction="higher", section=SECTION, stage="quality",
       source="quality", level="teacher", order=700, in_teacher_dataset=False, rank=False,
       description="share of GSM8K traces whose arithmetic chain the IR extractor found")
