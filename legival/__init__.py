"""The `legival` command line over `legival_core`: the typer app and the options every command shares
(`app`), one module per command (`commands/`), the console script (`cli`), the error boundary
(`crash`, `console`), the paths a command takes (`paths`), what a spec-driven command checks first
(`preflight`), running a flow (`flow_command`), the report's terminal table (`tables`) and how a command
ends (`lifecycle/`)."""
