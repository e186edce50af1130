#!/usr/bin/env bash
# The RL frameworks whose own code calls Legi-Val's reward (docs/reward.md), in their own virtual
# environment .venv-rl: verl 0.9.1 (pins a transformers older than the project's, so its reward manager
# runs here with the project's packages beneath it) and OpenRLHF 0.11.2 (needs flash-attn and deepspeed
# to install whole: only its reward client is used, installed without its dependencies). The project's
# .venv is seen through a .pth file (its packages sort last: .venv-rl's own win). Idempotent: a stamp
# records what was installed. tests/core/rl/test_frameworks.py skips with this command when absent.
set -euo pipefail
cd "$(dirname "$0")/.."
VENV=.venv-rl
want="verl==0.9.1 tensordict==0.10.0 pyvers==0.1.0 openrlhf==0.11.2 | omegaconf codetiming importlib_metadata pylatexenc"
stamp="$VENV/.legival-rl"
if [ -f "$stamp" ] && [ "$(cat "$stamp")" = "$want" ]; then
  exit 0
fi
[ -x .venv/bin/python ] || { echo "run make install first (.venv)"; exit 1; }
base=$(.venv/bin/python -c "import sys; print(sys.base_prefix)")
[ -x "$VENV/bin/python" ] || "$base/bin/python3" -m venv "$VENV"
site=$("$VENV/bin/python" -c "import sysconfig; print(sysconfig.get_paths()['purelib'])")
.venv/bin/python -c "import sysconfig; print(sysconfig.get_paths()['purelib'])" > "$site/zz_legival_project.pth"
pip() { "$VENV/bin/python" -m pip --disable-pip-version-check -q "$@"; }
pip install --no-deps verl==0.9.1 tensordict==0.10.0 pyvers==0.1.0 openrlhf==0.11.2
pip install omegaconf codetiming importlib_metadata pylatexenc
"$VENV/bin/python" -c "import verl.experimental.reward_loop.reward_manager, openrlhf.utils.agent, legival_core.rl.verl"
echo "$want" > "$stamp"
