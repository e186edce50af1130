"""Legi-Val's metrics as a training reward (docs/reward.md): the reward spec's scoring core
(`score.Scorer`), the items it takes (`items`), the HTTP shapes of the reward server (`http`), the
adapters training frameworks call (`trl.legibility_reward`, `verl.compute_score`) and the Goodhart
watch's analysis of what was scored (`watch`). `legival_core/rewards/` is another thing: reward-model
scores of stored traces."""
