"""The reward as TRL takes it: `GRPOTrainer(reward_funcs=[legibility_reward("examples/reward.yaml")])`
(docs/reward.md "TRL").

TRL calls a reward function with keywords: `prompts`, `completions` (strings, or for a conversational
dataset lists of `{"role": "assistant", "content": ...}`), `completion_ids`, every other dataset column
(one value per completion: the gold answer's column, `answer` by default), `trainer_state` (its
`global_step` tags the log), `log_metric`. It returns one float per completion (None: not scored, TRL
leaves it out of the mean). The function's `__name__` is the name TRL logs it under
(`rewards/<name>/mean`). The completions of one GRPO group come one after another with the same
prompt; a `uid` column (or any `group_column`) names them in the log.

The scoring runs in this process (`rl.score.Scorer`, students loaded on the first call), or on a
reward server (`url`: `legival reward serve`, which batches across trainers' requests).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from legival_core.rl.items import ItemError, items_from_lists
from legival_core.run_config.reward import RewardSpec, load_reward_spec


class LegibilityReward:
    """A callable TRL reward function over one reward spec (module docstring)."""

    def __init__(self, spec: RewardSpec, gold_column: str = "answer", group_column: str | None = "uid",
                 url: str | None = None, token: str | None = None,
                 scorer_factory: Callable[[RewardSpec], Any] | None = None) -> None:
        self.spec = spec
        self.gold_column = gold_column
        self.group_column = group_column
        self.url = url.rstrip("/") if url else None
        self._token = token
        self._factory = scorer_factory
        self._scorer: Any = None
        self.__name__ = spec.name

    def __call__(self, prompts: Sequence[Any], completions: Sequence[Any], completion_ids: Any = None,
                 **kwargs: Any) -> list[float | None]:
        if self.gold_column not in kwargs:
            columns = sorted(k for k in kwargs if k not in ("trainer_state", "log_metric", "log_extra", "environments"))
            raise ValueError(f"legibility reward: no dataset column {self.gold_column!r} with the gold answers "
                             f"(columns: {', '.join(columns) or 'none'}); name it with "
                             "legibility_reward(..., gold_column=NAME)")
        state = kwargs.get("trainer_state")
        step = getattr(state, "global_step", None)
        groups = kwargs.get(self.group_column) if self.group_column else None
        items = items_from_lists(prompts, completions, kwargs[self.gold_column], source="trl",
                                 limit=self.spec.max_completion_chars, step=step, groups=groups)
        results = self._remote(items) if self.url else self._local(items)
        log_metric = kwargs.get("log_metric")
        if callable(log_metric):
            self._log_means(results, log_metric)
        return [r.get("reward") for r in results]

    def _local(self, items: Sequence[Any]) -> list[dict[str, Any]]:
        if self._scorer is None:
            if self._factory is not None:
                self._scorer = self._factory(self.spec)
            else:
                from legival_core.rl.score import Scorer

                self._scorer = Scorer(self.spec)
        return [s.as_dict() for s in self._scorer.score(items)]

    def _remote(self, items: Sequence[Any]) -> list[dict[str, Any]]:
        from legival_core.rl.client import post_score

        assert self.url is not None
        sent = [it for it in items if not isinstance(it, ItemError)]
        got = iter(post_score(self.url, sent, self._token))
        return [{"reward": None, "error": str(it)} if isinstance(it, ItemError) else next(got) for it in items]

    def _log_means(self, results: Sequence[dict[str, Any]], log_metric: Callable[[str, float], None]) -> None:
        """Each component's mean and the watch's beside the reward in TRL's logs."""
        means: dict[str, list[float]] = {}
        for r in results:
            for name, part in (r.get("components") or {}).items():
                if part.get("value") is not None:
                    means.setdefault(name, []).append(float(part["value"]))
            watch = r.get("watch")
            if watch and watch.get("value") is not None:
                means.setdefault("watch", []).append(float(watch["value"]))
        for name, values in means.items():
            log_metric(f"{self.__name__}/{name}", sum(values) / len(values))

    def close(self) -> None:
        if self._scorer is not None:
            self._scorer.close()
            self._scorer = None


def legibility_reward(spec: str | Path | RewardSpec, *, gold_column: str = "answer", group_column: str | None = "uid",
                      url: str | None = None, token_file: str | Path | None = None) -> LegibilityReward:
    """The reward function of a reward spec (a YAML path or a loaded spec) for `GRPOTrainer`.
    `url`: score on `legival reward serve` there (`token_file`: its bearer token, when it asks one)."""
    loaded = spec if isinstance(spec, RewardSpec) else load_reward_spec(spec)
    token = Path(token_file).read_text(encoding="utf-8").strip() if token_file is not None else None
    return LegibilityReward(loaded, gold_column, group_column, url, token)
