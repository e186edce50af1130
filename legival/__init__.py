"""The `legival` command line and application layer over `legival_core`."""
