"""The built-in datasets; importing this package registers them (SPEC section 1).

Add a dataset with one module that calls `register_dataset(DatasetSpec(...))` and one import below.
"""

from __future__ import annotations

from legival_core.datasets import connections, gpqa, gsm8k, lsat, math  # noqa: F401  (registration)
from legival_core.datasets.base import DatasetSpec, Grader, Loader, Role, get_dataset, register_dataset

__all__ = ["DatasetSpec", "Grader", "Loader", "Role", "get_dataset", "register_dataset"]
