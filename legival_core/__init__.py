"""Legi-Val core library: pure data types, metrics, graders, backends and the store.

Imports without prefect, ray, vllm or torch: heavy dependencies load inside the functions that need
them.
"""

from legival_core.types import Grade, Problem, Span, Steps, Trace, trace_id_of

__all__ = ["Grade", "Problem", "Span", "Steps", "Trace", "trace_id_of"]
__version__ = "0.1.0"
