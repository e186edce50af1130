"""A store for the study-server tests where every step of every trace is distinct text (a marker
`mk-<teacher>-<problem>-<step>` per step) and every problem has its own gold, so a page can be checked
for "nothing after the prefix and no gold" item by item. Problems with an even index state their gold
in step m - 1 (attention checks need them); the others never write a number."""

from __future__ import annotations

import shutil
from dataclasses import dataclass
from pathlib import Path

from legival_core.datasets.base import grader_key
from legival_core.segment import SEGMENTER_VERSION
from legival_core.store import Store
from legival_core.store import study as reads
from legival_core.study.links import ADMIN_CODE, key_path, load_key, token
from tests._cli import legival

STUDY = "pilot"
XSS = '<script>window.__xss=1</script><img src=x onerror="window.__xss=2">'


def gold_of(i: int) -> str:
    return str(73_100_000 + i)


def step_text(teacher: str, i: int, j: int, m: int) -> str:
    if j == m - 1 and i % 2 == 0:
        return f"So the total is {gold_of(i)}."
    extra = f" {XSS} &amp; <b>bold</b>" if j == 1 else ""
    return f"We look again at mk-{teacher}-{i}-{j} and go on.{extra}"


@dataclass
class Served:
    db: Path
    key: bytes
    plan: list[dict[str, object]]
    """code, position, item_id, trace_id, k, m, fraction, kind of every assignment."""
    steps: dict[str, list[str]]
    gold: dict[str, str]
    """trace_id -> its problem's gold."""

    def token(self, code: str) -> str:
        return token(self.key, STUDY, code)

    @property
    def admin_token(self) -> str:
        return token(self.key, STUDY, ADMIN_CODE)

    def item(self, code: str, position: int) -> dict[str, object]:
        return next(r for r in self.plan if r["code"] == code and r["position"] == position)

    def codes(self) -> list[str]:
        return sorted({str(r["code"]) for r in self.plan})


def make_served_study(db: Path, participants: int = 4, per_participant: int = 3, attention: int = 1,
                      teachers: tuple[str, ...] = ("alpha", "beta", "gamma"), n_problems: int = 12, m: int = 12) -> Served:
    steps: dict[str, list[str]] = {}
    gold: dict[str, str] = {}
    with Store(db) as store:
        grader = grader_key("gsm8k")
        problems = [{"dataset": "gsm8k", "problem_id": f"p{i:03d}", "question": f"Question {i}: what is the total? {XSS}",
                     "gold": gold_of(i)} for i in range(n_problems)]
        traces, grades, rows, counts = [], [], [], []
        for t in teachers:
            for i in range(n_problems):
                tid = f"{t}|p{i:03d}"
                text, spans = "", []
                for j in range(1, m + 1):
                    s = step_text(t, i, j, m)
                    if text:
                        text += "\n"
                    spans.append((len(text), len(text) + len(s)))
                    text += s
                steps[tid] = [text[a:b] for a, b in spans]
                gold[tid] = gold_of(i)
                traces.append({"trace_id": tid, "teacher": t, "dataset": "gsm8k", "problem_id": f"p{i:03d}",
                               "reasoning": text, "answer_text": f"\\boxed{{{gold_of(i)}}}", "truncated": False})
                grades.append({"trace_id": tid, "grader": grader, "extracted": gold_of(i), "correct": True, "status": "ok"})
                rows += [{"trace_id": tid, "segmenter": SEGMENTER_VERSION, "idx": j, "start_char": a, "end_char": b}
                         for j, (a, b) in enumerate(spans, start=1)]
                counts.append({"trace_id": tid, "segmenter": SEGMENTER_VERSION, "m": m})
        with store.transaction():
            for table, data in (("problems", problems), ("traces", traces), ("grades", grades), ("steps", rows),
                                ("step_counts", counts)):
                store.insert_rows(table, data)
    r = legival("study", "create", "--db", str(db), "--name", STUDY, "--problems", str(n_problems // 2),
                "--participants", str(participants), "--per-participant", str(per_participant),
                "--attention", str(attention))
    assert r.returncode == 0, r.stderr
    with Store(db, read_only=True) as store:
        plan = reads.assignments(store, STUDY).to_dicts()
    return Served(db, load_key(key_path(db, STUDY)), plan, steps, gold)


def leaks(served: Served, code: str, position: int, text: str) -> list[str]:
    """What `text` (a page or response) shows of the item at `position` that it must not: a step after
    the prefix, the gold (unless the prefix states it: an attention check), the trace id or teacher."""
    it = served.item(code, position)
    tid, k = str(it["trace_id"]), int(str(it["k"]))
    found = [s for s in served.steps[tid][k:] if s.split(" and go on")[0] in text]
    shown = served.steps[tid][:k]
    if served.gold[tid] in text and not any(served.gold[tid] in s for s in shown):
        found.append("gold " + served.gold[tid])
    found += [x for x in (tid, str(it["item_id"])) if x in text]
    return found


def copy_served(template: Served, folder: Path) -> Served:
    """A fresh copy of a made study (its store and key folder) in `folder`: one per test, the study made once."""
    db = folder / "s.duckdb"
    shutil.copy(template.db, db)
    shutil.copytree(template.db.parent / f"{template.db.name}.studies", folder / f"{db.name}.studies")
    return Served(db, template.key, template.plan, template.steps, template.gold)
