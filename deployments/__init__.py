"""Build Prefect deployments (prefect.yaml) from a benchmark spec: see `deployments.build`."""
