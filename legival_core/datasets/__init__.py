"""The datasets (SPEC section 1): one module each, found by the registry's package scan.

A new dataset is one module in this package that calls `register_dataset(DatasetSpec(...))`.
"""

from __future__ import annotations

from legival_core.datasets.base import DatasetSpec, Grader, Loader, Role, get_dataset, register_dataset

__all__ = ["DatasetSpec", "Grader", "Loader", "Role", "get_dataset", "register_dataset"]
