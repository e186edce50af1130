"""A plugin whose own code fails while it is imported (tests of the registry's plugin errors)."""

from legival_core.metrics.base import metric

metric("broken_plugin_column")  # type: ignore[call-arg]  # the required keywords are missing: TypeError
