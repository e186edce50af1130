"""The report, in rooms that import only downward (`.importlinter` "the report's rooms"):
`stage` (the report stage: compute, record the run, diff, write) > `render` (files, figures, the
dashboard) > `paper` (the papers' tables and figures) > `compute` (every table from the store).
docs/architecture.md, docs/reports.md.
"""
