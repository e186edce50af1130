"""infra/ and prefect.yaml: manifests parse, and what they reference exists (entrypoints, flow
parameters, images, work pools, engine options, specs)."""

from __future__ import annotations

import dataclasses
import importlib
import inspect
from pathlib import Path

import pytest
import yaml

from tests.conftest import REPO

INFRA = REPO / "infra"


def _docs(path: Path) -> list[dict]:
    return [d for d in yaml.safe_load_all(path.read_text()) if d is not None]


def _image() -> str:
    for line in (INFRA / "docker" / "Dockerfile").read_text().splitlines():
        if "docker build" in line and " -t " in line:
            return line.split(" -t ")[1].split()[0]
    raise AssertionError("infra/docker/Dockerfile names no image tag")


def _images(obj: object) -> list[str]:
    if isinstance(obj, dict):
        return [v for k, v in obj.items() if k == "image" and isinstance(v, str)] + [
            i for v in obj.values() for i in _images(v)]
    if isinstance(obj, list):
        return [i for v in obj for i in _images(v)]
    return []


@pytest.mark.parametrize("path", sorted(p for p in INFRA.rglob("*.y*ml")), ids=lambda p: str(p.relative_to(REPO)))
def test_every_manifest_parses(path: Path) -> None:
    assert _docs(path)


def test_images_are_the_one_built_by_the_dockerfile() -> None:
    image = _image()
    found = [i for p in INFRA.rglob("*.y*ml") for d in _docs(p) for i in _images(d)]
    assert found and set(found) == {image}


def test_raycluster_has_gpu_worker_groups() -> None:
    (rc,) = _docs(INFRA / "kuberay" / "raycluster.yaml")
    assert rc["apiVersion"] == "ray.io/v1" and rc["kind"] == "RayCluster"
    import ray

    assert rc["spec"]["rayVersion"] == ray.__version__
    groups = rc["spec"]["workerGroupSpecs"]
    assert groups
    for g in groups:
        (c,) = g["template"]["spec"]["containers"]
        gpus = c["resources"]["limits"]["nvidia.com/gpu"]
        assert g["rayStartParams"]["num-gpus"] == gpus and int(gpus) >= 1
        assert g["minReplicas"] <= g["replicas"] <= g["maxReplicas"]


def test_ray_up_config() -> None:
    (cfg,) = _docs(INFRA / "ray" / "cluster.yaml")
    types = cfg["available_node_types"]
    assert cfg["head_node_type"] in types
    assert any(t["resources"].get("GPU", 0) >= 1 for t in types.values())
    assert sum(t.get("max_workers", 0) for t in types.values()) >= cfg["max_workers"]


def test_vllm_engine_configs_are_backend_options() -> None:
    from legival_core.backends.vllm_backend import VllmOptions

    fields = {f.name for f in dataclasses.fields(VllmOptions)}
    configs = sorted((INFRA / "vllm").glob("*.yaml"))
    assert configs
    for p in configs:
        (opts,) = _docs(p)
        assert set(opts) <= fields, f"{p.name}: not VllmOptions fields: {set(opts) - fields}"
        assert opts["enable_chunked_prefill"] is True and opts["max_model_len"] > 0
        assert opts["engine_kwargs"]["enable_prefix_caching"] is True
        VllmOptions(**opts)


def test_cluster_spec_validates_and_uses_the_engine_configs() -> None:
    from legival_core.run_config import load_spec

    s = load_spec(INFRA / "specs" / "cluster.yaml", check_files=False)
    assert s.execution.gpus_per_engine >= 1 and s.execution.ray_address != "local"
    for st in s.students:
        assert st.backend == "vllm" and st.engine_config is not None and st.engine_config.is_file()
        assert st.options()["enable_chunked_prefill"] is True
    for t in s.teachers:
        assert all(p.is_file() for p in t.traces)


def _entrypoint(ep: str):
    file, name = ep.split(":")
    assert (REPO / file).is_file(), ep
    module = importlib.import_module(file.removesuffix(".py").replace("/", "."))
    return getattr(module, name)


def test_prefect_yaml_deployments_reference_real_flows_and_params() -> None:
    from deployments.build import deployment_name
    from legival_core.run_config import load_spec

    cfg = yaml.safe_load((REPO / "prefect.yaml").read_text())
    deps = cfg["deployments"]
    names = [d["name"] for d in deps]
    assert "benchmark" in names and len(set(names)) == len(names)
    bench = deps[names.index("benchmark")]
    assert bench["schedules"] and bench["schedules"][0]["cron"].count(" ") == 4
    for d in deps:
        f = _entrypoint(d["entrypoint"])
        params = set(inspect.signature(f.fn).parameters)
        assert set(d["parameters"]) <= params, d["name"]
        spec = load_spec(REPO / d["parameters"]["spec"])
        for t in d["parameters"].get("teachers", []):
            spec.teacher(t)
    teachers = {t.name for t in load_spec(REPO / bench["parameters"]["spec"]).teachers}
    assert {n for n in names if n.startswith("teacher-")} == {deployment_name(t) for t in teachers}
    (worker,) = [d for d in _docs(INFRA / "prefect" / "worker.yaml") if d["kind"] == "Deployment"]
    cmd = worker["spec"]["template"]["spec"]["containers"][0]["command"]
    assert cmd[cmd.index("--pool") + 1] == bench["work_pool"]["name"]
    assert worker["spec"]["replicas"] == 1


def test_prefect_yaml_is_what_the_builder_writes() -> None:
    from deployments.build import render_prefect_yaml
    from legival_core.run_config import load_spec

    cfg = yaml.safe_load((REPO / "prefect.yaml").read_text())
    ref = cfg["deployments"][0]["parameters"]["spec"]
    assert (REPO / "prefect.yaml").read_text() == render_prefect_yaml(load_spec(REPO / ref), ref)


def test_every_worker_runs_one_flow_run_at_a_time() -> None:
    """One worker per store with `--limit 1` (docs/runbook.md: DuckDB allows one writing process per
    file): the runbook's commands, infra/prefect/setup.sh and the Kubernetes worker agree."""
    texts = [INFRA / "prefect" / "setup.sh", REPO / "docs" / "runbook.md"]
    starts = [line for p in texts for line in p.read_text().splitlines()
              if "worker start" in line and not line.lstrip().startswith("#")]
    assert len(starts) >= 2 and all("--limit 1" in line for line in starts), starts
    (worker,) = [d for d in _docs(INFRA / "prefect" / "worker.yaml") if d["kind"] == "Deployment"]
    cmd = worker["spec"]["template"]["spec"]["containers"][0]["command"]
    assert cmd[cmd.index("--limit") + 1] == "1"
