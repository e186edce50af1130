"""The registered gCoT quality groups: one module each (`quality.group.register_quality_group`).

Nothing is imported here: the registry finds the modules by scanning this package
(`legival_core.registry.BUILTIN_PACKAGES`), so a new quality metric is one new module.
"""
