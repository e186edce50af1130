"""`legival plan`: what a benchmark run will compute and cost, before it starts (issue 14).

`build.plan_benchmark` asks each stage's own `plan()` what is missing (the same code `legival run`
then executes, so the counts are the run's), on a scratch store that holds every ingestible trace
(`ingest`); `shards` reads every transfer shard at once; `prompts` counts the rollouts' prompt tokens
with the student's tokenizer and what is left after prefix sharing; `throughput` reads an engine's rates
from `configs/throughput.yaml`, `calibration` fits them to what this store's runs measured, and `timing`
turns the shards' work into seconds; `model` holds the plan's records, `render` prints them (a table,
markdown).
"""
