"""The one judge factory: a judge by its registered name (`legival judge`, the Prefect judge task and
`legival run` all build their judge here).

Every judge registers itself with a `JudgeInfo` (`register("judge", NAME, CLASS, meta=JudgeInfo(...))`)
saying what it is: an LLM judge (a `BaseJudge` subclass, taking `model`, `base_url`, `api_key`, `limits`
and `prices` keyword arguments among `BaseJudge`'s) or not (`lexical`: cues stored by the efficiency stage, nothing
to build), whether it needs a model id, and whether it has a provider batch API. `make_judge` reads
that record and nothing else, so a new judge is one module in this package and no edit here.

This module takes plain arguments (a domain module does not read the spec): the caller passes the
spec's values (`legival_core.run_config.Judge`), which are the only defaults.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from legival_core.judges.base import BaseJudge, JudgeLimits
from legival_core.judges.records import MissingAPIKey
from legival_core.registry import entries, entry

if TYPE_CHECKING:
    from legival_core.llm.cost import Prices

ESTIMATE_ONLY_KEY = "estimate-only-no-call"
"""Stands in for a missing API key when only an estimate is wanted (nothing is ever sent)."""


@dataclass(frozen=True, slots=True)
class JudgeInfo:
    """Registry metadata of a judge. `llm`: calls a model (else nothing to build: the judge's rows
    come from another stage); `needs_model`: has no default model (e.g. a self-hosted server's
    model id); `batch`: has a provider batch API (`records.BatchJudge`)."""

    llm: bool
    needs_model: bool
    batch: bool


def judge_info(name: str) -> JudgeInfo:
    """The registered metadata of a judge (UnknownName lists the registered ones)."""
    meta = entry("judge", name).meta
    return meta if isinstance(meta, JudgeInfo) else JudgeInfo(llm=True, needs_model=False, batch=False)


def batch_judges() -> list[str]:
    """The registered judges that have a batch API."""
    return [e.name for e in entries("judge") if isinstance(e.meta, JudgeInfo) and e.meta.batch]


def make_judge(
    name: str,
    *,
    model: str | None,
    base_url: str | None,
    concurrency: int,
    rpm: float | None,
    prices: Prices | None = None,
    estimate_only: bool = False,
) -> BaseJudge:
    """Build the registered LLM judge `name`. `model=None` takes the judge's own default model (an
    error for a judge that `needs_model`). Without an API key, `estimate_only` builds the judge with
    a placeholder key (an estimate sends nothing); otherwise `MissingAPIKey` names the variables.
    ValueError for an unknown name, a non-LLM judge, or invalid limits."""
    e = entry("judge", name)
    info = judge_info(e.name)
    if not info.llm:
        raise ValueError(f"judge {e.name!r} calls no model: there is no judge object to build")
    if info.needs_model and not model:
        raise ValueError(f"judge {e.name!r} needs a model (the served model id)")
    kw: dict[str, Any] = {"base_url": base_url, "limits": JudgeLimits(concurrency=concurrency, rpm=rpm),
                          "prices": prices}
    if model:
        kw["model"] = model
    try:
        judge: BaseJudge = e.obj(**kw)
    except MissingAPIKey:
        if not estimate_only:
            raise
        judge = e.obj(api_key=ESTIMATE_ONLY_KEY, **kw)
    return judge
