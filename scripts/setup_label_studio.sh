#!/usr/bin/env bash
# Create the separate virtual environment that holds Label Studio (the gCoT authors' annotation tool).
#
# Only the tests use it: tests/cli/test_study_label_studio.py starts a real Label Studio server, gives
# it our `legival study export` and feeds its own JSON exports to `legival study import` (docs/study.md
# "Label Studio"). It pins Django and many web packages of its own, so it does not share the main venv.
# About 1 GB; the test says it is skipped, with this script's name, when the venv is absent.
#
#   LS_VENV   where to create it (default: <repo>/.venv-ls)
#   LS_SPEC   the pip requirement (default: label-studio==1.23.2, the version the tests were written on)
#
# Idempotent: a marker file is written last, and a venv that has it is left alone.
set -euo pipefail

repo_root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
venv="${LS_VENV:-$repo_root/.venv-ls}"
spec="${LS_SPEC:-label-studio==1.23.2}"
marker="$venv/.legival-ls-ready"

if [[ -f "$marker" ]] && [[ "$(cat "$marker")" == "$spec" ]] && [[ -x "$venv/bin/label-studio" ]]; then
  echo "Label Studio venv already complete: $venv ($spec)"
  exit 0
fi
start=$(date +%s)
[[ -x "$venv/bin/python" ]] || python3 -m venv "$venv"
"$venv/bin/python" -m pip --disable-pip-version-check -q install "$spec"
echo "$spec" > "$marker"
echo "Label Studio venv ready: $venv ($spec) in $(( $(date +%s) - start )) s"
