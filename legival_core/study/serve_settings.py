"""The defaults of `legival study serve` (the one place they live: the CLI reads them with `default_of`)."""

from __future__ import annotations

from pydantic import Field

from legival_core.run_config.base import Strict


class StudyServeSettings(Strict):
    """Where the study server listens (docs/study.md "Serving a study")."""

    host: str = "127.0.0.1"
    """Loopback: only this machine. Another address puts the participants' tokens on the network."""
    port: int = Field(default=8766, ge=0, le=65535, description="0: any free port")
