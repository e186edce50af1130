#!/usr/bin/env bash
# Local Prefect setup (docs/runbook.md): a server on 127.0.0.1, the process work pool, the
# deployments of prefect.yaml, and ONE worker running one flow run at a time (`--limit 1`: DuckDB
# allows one writing process per store file). Run from the repository root; stop with Ctrl-C twice.
set -euo pipefail
cd "$(dirname "$0")/../.."
PY=${LEGIVAL_VENV:-.venv}/bin/python
PORT=${PREFECT_PORT:-4200}
POOL=${LEGIVAL_POOL:-legival-process}
export PREFECT_API_URL="http://127.0.0.1:${PORT}/api" PREFECT_SERVER_ANALYTICS_ENABLED=false
"$PY" -m prefect server start --host 127.0.0.1 --port "$PORT" > prefect-server.log 2>&1 &
until curl -fs "$PREFECT_API_URL/health" > /dev/null; do sleep 1; done
"$PY" -m prefect work-pool create "$POOL" --type process --overwrite
"$PY" -m deployments.build examples/demo.yaml --pool "$POOL"
"$PY" -m prefect --no-prompt deploy --all
echo "UI: http://127.0.0.1:${PORT}  -  trigger: prefect deployment run benchmark/benchmark"
exec "$PY" -m prefect worker start --pool "$POOL" --limit 1
