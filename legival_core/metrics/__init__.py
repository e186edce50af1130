"""The metrics: one module per metric family, each registering its report columns (`base.metric`).

Nothing is imported here: the registry finds the modules by scanning this package
(`legival_core.registry.BUILTIN_PACKAGES`), so a new metric is one new module.
"""
