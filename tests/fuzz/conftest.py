"""Property-based fuzzing of the input boundaries (issue 26, part 8): answer extraction and the graders,
the segmenter, the Z3 IR parser and the spec loader.

Every property says: no exception but the boundary's documented error type, no hang, and an invariant
of the output. The budget is fixed: the profile below is derandomized (the same examples on every run,
so CI is reproducible and a failure reproduces locally), keeps no example database and its caches
outside the repository, and bounds every example by a deadline; each module also sets a test-level
timeout (`method="thread"`: a regular expression stuck in C ignores signals). The whole folder runs in
about 20 s on one core.

`LEGIVAL_FUZZ_SCALE=20 .venv/bin/python -m pytest tests/fuzz` runs 20 times the examples,
with a fresh random seed each run (`derandomize` off): a deeper hunt for a bug before it is pinned as an
`@example`.
"""

from __future__ import annotations

import os
import tempfile
from datetime import timedelta
from pathlib import Path

from hypothesis import HealthCheck, settings
from hypothesis.configuration import set_hypothesis_home_dir

# Hypothesis keeps caches (unicode tables, constants) in ./.hypothesis even without an example
# database: outside the repository instead (HYPOTHESIS_STORAGE_DIRECTORY still wins).
if not os.environ.get("HYPOTHESIS_STORAGE_DIRECTORY"):
    set_hypothesis_home_dir(Path(tempfile.gettempdir()) / "legival-hypothesis")

PROFILE = "legival-fuzz"
SCALE = max(1, int(os.environ.get("LEGIVAL_FUZZ_SCALE", "1") or 1))

settings.register_profile(
    PROFILE,
    max_examples=40,
    deadline=timedelta(seconds=5),  # generous: two xdist workers (and whatever else runs) share two cores
    derandomize=SCALE == 1,
    database=None,
    print_blob=False,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large, HealthCheck.large_base_example],
)


def fuzz(max_examples: int, deadline_s: float = 5.0) -> settings:
    """The fuzz profile with this test's own example count (times LEGIVAL_FUZZ_SCALE) and deadline."""
    return settings(settings.get_profile(PROFILE), max_examples=max_examples * SCALE,
                    deadline=timedelta(seconds=deadline_s))
