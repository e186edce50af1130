"""A tiny store of transfer traces for the study tests: every teacher solved every problem (gsm8k,
gold 42), each trace of `m` steps; in the traces of the problems listed in `stating`, step `m - 1`
states the gold ("So the total is 42."), in the others no step holds a number."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from legival_core.datasets.base import grader_key
from legival_core.segment import SEGMENTER_VERSION
from legival_core.store import Store

WORDS = "We add the two numbers and then check the result carefully."


def trace_text(m: int, stated_at: int | None) -> tuple[str, list[tuple[int, int]]]:
    text, spans = "", []
    for j in range(1, m + 1):
        s = "So the total is 42." if j == stated_at else WORDS
        if text:
            text += " "
        spans.append((len(text), len(text) + len(s)))
        text += s
    return text, spans


def make_store(path: Path, teachers: Sequence[str] = ("alpha", "beta", "gamma"), n_problems: int = 16,
               m: int = 12, stating: Sequence[int] = (0, 1, 2, 3)) -> Path:
    """The store at `path` (created); problem i is `p{i:03d}`."""
    with Store(path) as store:
        grader = grader_key("gsm8k")
        problems = [{"dataset": "gsm8k", "problem_id": f"p{i:03d}", "question": f"Question {i}?", "gold": "42"}
                    for i in range(n_problems)]
        traces, grades, steps, counts = [], [], [], []
        for t in teachers:
            for i in range(n_problems):
                tid = f"{t}|p{i:03d}"
                text, spans = trace_text(m, m - 1 if i in stating else None)
                traces.append({"trace_id": tid, "teacher": t, "dataset": "gsm8k", "problem_id": f"p{i:03d}",
                               "reasoning": text, "answer_text": "\\boxed{42}", "truncated": False})
                grades.append({"trace_id": tid, "grader": grader, "extracted": "42", "correct": True, "status": "ok"})
                steps += [{"trace_id": tid, "segmenter": SEGMENTER_VERSION, "idx": j, "start_char": a, "end_char": b}
                          for j, (a, b) in enumerate(spans, start=1)]
                counts.append({"trace_id": tid, "segmenter": SEGMENTER_VERSION, "m": m})
        with store.transaction():
            for table, rows in (("problems", problems), ("traces", traces), ("grades", grades), ("steps", steps),
                                ("step_counts", counts)):
                store.insert_rows(table, rows)
    return path
