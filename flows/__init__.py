"""Prefect flows: wiring only. Each takes the spec path (plus optional overrides) so it can be
deployed as-is (`flows/<file>.py:<flow>` in prefect.yaml) and run by a worker."""
