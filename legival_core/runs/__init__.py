"""Run records (docs/runs.md): `record` stores what a benchmark run reported (metric values,
intervals, bootstrap replicates, producer versions, inputs), reading the report's tables through the
`Reported` protocol; `diff` compares two records against their noise.
"""
