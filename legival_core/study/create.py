"""`legival study create`'s path: read the candidates, design, make the key, write the design in one
transaction. Order matters for "nothing changed" on a refusal: every check (the name, the teachers,
the design) happens before the key file is written, and a failed write removes the key it made."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from legival_core.store import study as reads
from legival_core.store.db import Store
from legival_core.study.candidates import transfer_candidates, with_answer_first
from legival_core.study.design import Design, DesignError, StudyConfig, design_study, participant_codes
from legival_core.study.links import ADMIN_CODE, KeyFileError, create_key, key_path, token, token_sha256
from legival_core.study.settings import StudySettings

DEFAULT_CONSENT = """\
You are invited to take part in a research study on how easy it is to follow written reasoning.

You will see a series of problems. For each, part of a worked solution is shown; read it and give the
final answer you think is correct. You may rate how easy the reasoning was to follow (1 to 5).
It takes about {minutes} minutes. Taking part is voluntary: you may stop at any time by closing the page.

We store only your answers, your ratings, the time spent on each item and a participant code
({code_example}). We store no name, e-mail address, IP address or other personal data.
The answers are analysed in aggregate and may be published without any way to identify you.

By continuing you confirm that you are at least 18 years old and agree to take part.
"""
"""The consent text when `--consent` gives none ({minutes}, {code_example} filled in). A lab replaces
it with the text its ethics board approved (docs/study.md "Ethics checklist")."""


@dataclass(frozen=True, slots=True)
class Created:
    design: Design
    key_file: Path
    links: tuple[tuple[str, str], ...]
    """(code, token) per participant, then (ADMIN_CODE, token): shown once, on standard output."""


def teachers_with_candidates(store: Store) -> list[str]:
    return sorted(set(transfer_candidates(store)["teacher"].to_list()))


def create_study(store: Store, settings: StudySettings, step_interval: int, profile: str,
                 consent: str | None = None) -> Created:
    """Design and store the study (module docstring); `DesignError` / `StudyExists` / `KeyFileError` on
    a refusal (a key file already there for this name, from a study stored elsewhere or a copied store,
    is refused, never replaced)."""
    if settings.name in reads.study_names(store):
        raise reads.StudyExists(f"study {settings.name!r} exists in {store.path}: choose another --name")
    path = key_path(store.path, settings.name)
    if path.exists() or path.is_symlink():  # never overwritten: it may hold the only way to a study's links
        raise KeyFileError(f"--name: {path}: a key file from an earlier study named {settings.name} exists "
                           "(no such study in this store): move it away, or choose another --name")
    known = teachers_with_candidates(store)
    teachers = settings.teachers or tuple(known)
    if not known:
        raise DesignError("--db", f"{store.path}: no transfer traces (correct, segmented, m >= 1): grade and "
                          "segment traces first (`legival ingest`, `legival efficiency`)")
    unknown = [t for t in teachers if t not in known]
    if unknown:
        raise DesignError("--teachers", f"no transfer traces of teacher {unknown[0]!r} in {store.path} "
                          f"(teachers with transfer traces: {', '.join(known)})")
    config = StudyConfig(settings.name, tuple(teachers), settings.problems, settings.depths, settings.per_participant,
                         settings.participants, settings.attention, settings.seed, settings.minutes_per_item,
                         step_interval, profile)
    candidates = transfer_candidates(store, config.teachers)
    if config.attention:
        candidates = with_answer_first(store, candidates, config.seed)
    else:
        import polars as pl

        candidates = candidates.with_columns(pl.lit(None, pl.Int64).alias("answer_first"))
    design = design_study(candidates, config)
    per = config.per_participant + config.attention
    text = consent if consent is not None else DEFAULT_CONSENT.format(
        minutes=round(per * config.minutes_per_item), code_example=participant_codes(1)[0])
    key = create_key(path)
    codes = [a.code for a in design.assignments] + [ADMIN_CODE]
    links = tuple((c, token(key, config.name, c)) for c in codes)
    try:
        reads.write_design(
            store,
            {"name": config.name, "seed": config.seed, "design_version": design.version,
             "config": config.as_dict(), "consent_text": text},
            [{"item_id": i.item_id, "trace_id": i.trace_id, "k": i.k, "m": i.m, "fraction": i.fraction,
              "kind": i.kind} for i in design.items],
            [{"code": c, "token_sha256": token_sha256(t), "admin": c == ADMIN_CODE} for c, t in links],
            [{"code": a.code, "position": p, "item_id": item} for a in design.assignments
             for p, item in enumerate(a.items)],
        )
    except BaseException:
        path.unlink(missing_ok=True)
        raise
    return Created(design, path, links)
