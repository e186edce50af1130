"""Reading what users give: trace sources and input files (docs/sources.md).

`input_files` opens a user's file whatever holds it (plain, gzip, zstd, Parquet; told by its first
bytes), bounded per record; `records` reads its JSONL records through the one JSON boundary
(`legival_core.untrusted_json`); `tables` reads a CSV or Parquet table row by row, each row with where
it is (`legival agreement`, the judge's human annotations); `zip_members` checks a zip's members before
another reader inflates them. `sources/` holds one registered module per trace source (our JSONL/Parquet, Inspect AI logs,
lm-eval samples, Hugging Face datasets, OpenAI batch output), each a `sources.TraceSource`: a reader
that yields validated records; `trace_records` turns a record into a trace, its problem and its grade
input. Grading itself (answer extraction, graders) is `legival_core.grading`.
"""
