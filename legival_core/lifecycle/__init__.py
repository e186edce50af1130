"""Processes and runs coming to an end, in the library: every child process owned and ended on every
exit path (`children`, with the `guardian` process that ends them when the owner dies however it
dies), and a run's cancel (`cancel`: stages stop at their next batch boundary). The CLI's signals are
`legival/lifecycle/`, the Prefect side's `tasks/lifecycle/` (docs/orchestration.md)."""
