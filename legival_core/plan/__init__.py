"""`legival plan`: what a benchmark run will compute and cost, before it starts (issue 14).

`build.plan_benchmark` asks each stage's own `plan()` what is missing (the same code `legival run`
then executes, so the counts are the run's), `prompts` counts the rollouts' prompt tokens with the
student's tokenizer and what is left after prefix sharing, and `throughput` turns tokens into wall
time and GPU-hours from `configs/throughput.yaml`.
"""
