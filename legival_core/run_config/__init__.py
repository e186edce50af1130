"""The benchmark spec (pydantic, validated at load) and the one source of every default.

`legival run SPEC.yaml` reads a whole spec; every other command builds the section it needs from
these models with its options as overrides (`run_config.base.default_of`), so two commands cannot disagree
about a default.
"""

from legival_core.run_config.analyses import Monitor, RewardModel, Rewards, SupervisorModel
from legival_core.run_config.base import SpecError, Strict, default_of, format_errors
from legival_core.run_config.benchmark import BenchmarkSpec, load_spec, parse_spec
from legival_core.run_config.sections import (
    Efficiency,
    Execution,
    Ingest,
    Judge,
    Profile,
    Quality,
    Report,
    Transfer,
)
from legival_core.run_config.students import Decoding, Student, student_config
from legival_core.run_config.teachers import Generation, Teacher

__all__ = [
    "BenchmarkSpec",
    "Decoding",
    "Efficiency",
    "Execution",
    "Generation",
    "Ingest",
    "Judge",
    "Monitor",
    "Profile",
    "Quality",
    "Report",
    "RewardModel",
    "Rewards",
    "SpecError",
    "Strict",
    "Student",
    "SupervisorModel",
    "Teacher",
    "Transfer",
    "default_of",
    "format_errors",
    "load_spec",
    "parse_spec",
    "student_config",
]
