"""Build the backend a student config names, through the one registry."""

from __future__ import annotations

from legival_core.backends.base import TextBackend, make_backend
from legival_core.transfer.rollout_plan import StudentConfig


def make_student_backend(config: StudentConfig) -> TextBackend:
    """Every registered backend factory takes (model, dtype, **options): no per-backend code here."""
    return make_backend(config.backend, config.model, config.dtype, config.backend_options)
