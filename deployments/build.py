"""prefect.yaml from the spec: a weekly `benchmark` deployment and one deployment per teacher.

All deployments run the same entrypoint (`flows/benchmark.py:benchmark`); a teacher deployment
passes `teachers: [NAME]`, so it ingests and rolls out that teacher only and then rebuilds the
aggregates. Shared settings (entrypoint, work pool, tags, version) live once under `definitions`
and are merged in with YAML anchors. The file is generated: edit the spec, then run
`python -m deployments.build SPEC` (or `legival add-teacher`, which does both).

No `pull` section: `prefect deploy` then records the directory it ran in (the repository root) as
the flow's working directory, which is what a process worker on the same machine needs. For a
cluster, add a `git_clone` pull step (docs/runbook.md).
"""

from __future__ import annotations

import argparse
import json
import re
from dataclasses import dataclass
from pathlib import Path

import yaml

from legival_core.run_config import BenchmarkSpec, load_spec

ENTRYPOINT = "flows/benchmark.py:benchmark"
DEFAULT_POOL = "legival-process"
DEFAULT_CRON = "0 3 * * 1"
"""Weekly full rerun: Mondays 03:00 UTC."""


@dataclass(frozen=True, slots=True)
class DeploymentPlan:
    name: str
    parameters: dict[str, object]
    description: str
    scheduled: bool = False


def deployment_name(teacher: str) -> str:
    return "teacher-" + (re.sub(r"[^a-z0-9]+", "-", teacher.lower()).strip("-") or "unnamed")


def plan_deployments(spec: BenchmarkSpec, spec_ref: str) -> list[DeploymentPlan]:
    plans = [DeploymentPlan("benchmark", {"spec": spec_ref}, "Full benchmark rerun (weekly)", scheduled=True)]
    plans += [
        DeploymentPlan(deployment_name(t.name), {"spec": spec_ref, "teachers": [t.name]},
                       f"Teacher {t.name}: its ingest and rollouts, then the aggregates")
        for t in spec.teachers
    ]
    return plans


def _q(v: object) -> str:
    """A YAML scalar or flow sequence (JSON is valid YAML)."""
    return json.dumps(v)


def render_prefect_yaml(spec: BenchmarkSpec, spec_ref: str, pool: str = DEFAULT_POOL, cron: str = DEFAULT_CRON,
                        timezone: str = "UTC") -> str:
    lines = [
        f"# Generated from {spec_ref} by deployments/build.py (or `legival add-teacher`); edit the spec, not this file.",
        "# Deploy from the repository root:  prefect deploy --all   (docs/runbook.md)",
        "name: legival",
        "prefect-version: 3.9.1",
        "",
        "definitions:",
        "  work_pools:",
        "    process_pool: &process_pool",
        f"      name: {_q(pool)}",
        "      work_queue_name: default",
        "      job_variables: {}",
        "  settings: &legival_settings",
        f"    entrypoint: {ENTRYPOINT}",
        "    version: \"1\"",
        "    tags: [legival]",
        "    work_pool: *process_pool",
        "  schedules:",
        "    weekly: &weekly",
        f"      cron: {_q(cron)}",
        f"      timezone: {_q(timezone)}",
        "      active: true",
        "",
        "deployments:",
    ]
    for d in plan_deployments(spec, spec_ref):
        lines += [
            f"  - name: {_q(d.name)}",
            "    <<: *legival_settings",
            f"    description: {_q(d.description)}",
            f"    parameters: {_q(d.parameters)}",
            "    schedules: [*weekly]" if d.scheduled else "    schedules: []",
        ]
    text = "\n".join(lines) + "\n"
    yaml.safe_load(text)  # never write a file that does not parse
    return text


def write_prefect_yaml(spec_path: str | Path, out: str | Path = "prefect.yaml", root: str | Path = ".",
                       pool: str = DEFAULT_POOL, cron: str = DEFAULT_CRON) -> Path:
    """`spec_path` is recorded relative to `root` (the deploy directory) when it lies inside it."""
    root = Path(root).resolve()
    spec_abs = Path(spec_path).resolve()
    try:
        ref = str(spec_abs.relative_to(root))
    except ValueError:
        ref = str(spec_abs)
    out = Path(out)
    out.write_text(render_prefect_yaml(load_spec(spec_abs, check_files=False), ref, pool, cron), encoding="utf-8")
    return out


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    p.add_argument("spec", nargs="?", default="examples/demo.yaml")
    p.add_argument("--out", default="prefect.yaml")
    p.add_argument("--pool", default=DEFAULT_POOL)
    p.add_argument("--cron", default=DEFAULT_CRON)
    a = p.parse_args()
    print(write_prefect_yaml(a.spec, a.out, Path(a.out).resolve().parent, a.pool, a.cron))


if __name__ == "__main__":
    main()
