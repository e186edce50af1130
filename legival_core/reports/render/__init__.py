"""The files of a report: `bundle.Report` (the computed tables with the paper tables and the changes
beside them), `files.write_report` (every CSV, Parquet file, figure and the dashboard, written whole),
`plots` and `paper_plots` (matplotlib figures, names drawn as `labels`), `dashboard` and
`paper_sections` (the self-contained `index.html`, its page `templates/dashboard.html`) and `serve` (the
live dashboard over a read-only store).
"""
