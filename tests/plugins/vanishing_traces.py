"""A plugin (loaded through `LEGIVAL_PLUGINS`, in a process of its own) that removes the file named by
`LEGIVAL_TEST_VANISH` when the spec is loaded inside a Prefect flow run: the trace file a run checked
before it started is gone when the flow reads the spec, as when a user deletes it while the run starts
(issue 38 item 3), at the same point every time (tests/flows/test_run_boundary.py)."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import legival_core.run_config as spec_module

_load_spec = spec_module.load_spec


def _vanishing_load_spec(*args: Any, **kwargs: Any) -> Any:
    from prefect.context import FlowRunContext

    target = os.environ.get("LEGIVAL_TEST_VANISH")
    if target and FlowRunContext.get() is not None:
        Path(target).unlink(missing_ok=True)
    return _load_spec(*args, **kwargs)


spec_module.load_spec = _vanishing_load_spec
