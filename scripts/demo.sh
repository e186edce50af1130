#!/usr/bin/env bash
# The embedded demo: ingest the bundled real traces, compute efficiency metrics, print the table.
set -euo pipefail
cd "$(dirname "$0")/.."
L=${LEGIVAL_VENV:-.venv}/bin/legival
DB=${DEMO_DB:-demo-out/demo.duckdb}
OUT=${DEMO_OUT:-demo-out/report}
mkdir -p "$(dirname "$DB")"
"$L" ingest examples/data/gsm8k_md_eval_cot_5teachers.jsonl examples/data/gsm8k_gpt-oss-120b_200.jsonl --db "$DB"
"$L" efficiency --db "$DB"
"$L" report --db "$DB" --out "$OUT"
echo "report written to $OUT"
