"""Reward-model scoring of traces and its correlation with transfer utility (paper section 5.3)."""

from legival_core.rewards.models import (
    DEFAULT_MODELS,
    RM_CODE_VERSION,
    ProcessRewardModel,
    RewardModelSpec,
    RewardModelUnavailable,
    ScalarRewardModel,
    Score,
    TraceInput,
    load_reward_model,
    spec_default,
)

__all__ = ["DEFAULT_MODELS", "RM_CODE_VERSION", "ProcessRewardModel", "RewardModelSpec", "RewardModelUnavailable",
           "ScalarRewardModel", "Score", "TraceInput", "load_reward_model", "spec_default"]
