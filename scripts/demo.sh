#!/usr/bin/env bash
# The embedded demo: the whole benchmark flow (Prefect without a server, local Ray, DuckDB) on the
# bundled real traces of 5 teachers; ends with the report directory and the dashboard path.
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${LEGIVAL_VENV:-.venv}/bin/python
export PREFECT_SERVER_ANALYTICS_ENABLED=${PREFECT_SERVER_ANALYTICS_ENABLED:-false}
mkdir -p demo-out
"$PY" -m legival run examples/demo.yaml "$@" | tee demo-out/run.log
"$PY" - <<'PY'
import json
s = json.loads(open("demo-out/run.log").read().strip().splitlines()[-1])
print(f"report:    {s['out']}")
print(f"dashboard: {s['dashboard']}")
PY
# the compact teacher x dataset table and the coverage line (`legival report --wide` shows every column)
"$PY" -m legival.tables demo-out/report
