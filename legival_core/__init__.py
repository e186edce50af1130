"""Legi-Val core library: everything that computes a number (docs/architecture.md, "Layers" and
"Rooms"): the domain records, the registry, the store, the readers, graders, metrics, backends and
judges, the stages, the run configuration and the reports.

Imports without prefect, ray, vllm or torch: heavy dependencies load inside the functions that need
them.
"""

from legival_core.types import Grade, Problem, Span, Steps, Trace, trace_id_of

__all__ = ["Grade", "Problem", "Span", "Steps", "Trace", "trace_id_of"]
__version__ = "0.1.0"
