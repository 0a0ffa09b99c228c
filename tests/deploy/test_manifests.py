"""What users apply from deploy/: every manifest valid, every embedded config loadable, the
Dockerfile's install step the documented one, and the dashboard asking only for real metrics.

Built-in kinds are validated against the Kubernetes OpenAPI schemas shipped in the
``kubernetes-validate`` package (offline, strict: unknown fields are errors). Custom resources
(InferencePool, Gateway, HTTPRoute, ServiceMonitor) have no schema there; they are checked for
their required fields here, and an InferencePool is read by the very code the gateway reads it with.
The pieces that must fit together are checked by name: the pickers' replicas, probes and disruption
budget, the Redis their shared index names, the Service the InferencePool names, the route to the
pool, and the Envoy configuration shipped beside the pickers.
"""

from __future__ import annotations

import json
import re
import shutil
import subprocess
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import kubernetes_validate
import pytest
import yaml

from mmgate.config import parse_config
from mmgate.datalayer.kubernetes import POOL_GROUP, pool_target
from mmgate.datalayer.objectives import GROUP as OBJECTIVE_GROUP
from mmgate.gateway.app import build_gateway
from mmgate.scheduling import build_scheduler
from support.processes import REPO

DEPLOY = REPO / "deploy"
MANIFESTS = sorted(p for p in (DEPLOY / "kubernetes").rglob("*.yaml") if p.name != "kustomization.yaml")
K8S_VERSION = kubernetes_validate.latest_version()

ENVOY_KEY = "envoy.yaml"  # a ConfigMap key holding an Envoy configuration, not an mmgate one
POOL = DEPLOY / "kubernetes" / "inferencepool"
PARTS = ["gateway", "envoy", "envoy-front"]  # the ways to apply the pool: base/ + one of them
CUSTOM_REQUIRED: dict[str, tuple[str, ...]] = {
    "InferencePool": ("spec.selector.matchLabels", "spec.targetPorts", "spec.endpointPickerRef.name"),
    "Gateway": ("spec.gatewayClassName", "spec.listeners"),
    "HTTPRoute": ("spec.parentRefs", "spec.rules"),
    "ServiceMonitor": ("spec.selector", "spec.endpoints"),
}


def documents() -> list[tuple[str, dict[str, Any]]]:
    out = []
    for path in MANIFESTS:
        for i, doc in enumerate(yaml.safe_load_all(path.read_text())):
            if doc:
                out.append((f"{path.relative_to(REPO)}#{i}", doc))
    return out


def dig(doc: dict[str, Any], dotted: str) -> Any:
    value: Any = doc
    for key in dotted.split("."):
        value = value.get(key) if isinstance(value, dict) else None
    return value


def test_there_are_manifests() -> None:
    assert len(MANIFESTS) >= 4


@pytest.mark.parametrize(("where", "doc"), documents(), ids=lambda v: v if isinstance(v, str) else "")
def test_each_manifest_is_valid(where: str, doc: dict[str, Any]) -> None:
    kind = doc.get("kind")
    if kind in CUSTOM_REQUIRED:
        missing = [f for f in CUSTOM_REQUIRED[kind] if not dig(doc, f)]
        assert not missing, f"{where}: {kind} lacks {missing}"
        if kind == "InferencePool":
            pool_target(doc)  # raises naming the field if the gateway could not use it
        return
    kubernetes_validate.validate(doc, K8S_VERSION, strict=True)


KUSTOMIZATIONS = sorted((DEPLOY / "kubernetes").rglob("kustomization.yaml"))


def test_every_kustomization_lists_its_files() -> None:
    for kustomization in KUSTOMIZATIONS:
        resources = yaml.safe_load(kustomization.read_text())["resources"]
        bases = [r for r in resources if r.startswith("../")]
        for base in bases:
            assert (kustomization.parent / base / "kustomization.yaml").is_file(), (kustomization, base)
        listed = set(resources) - set(bases)
        present = {p.name for p in kustomization.parent.glob("*.yaml") if p.name != "kustomization.yaml"}
        assert listed == present, kustomization


@pytest.mark.skipif(shutil.which("kubectl") is None, reason="kubectl is not installed")
@pytest.mark.parametrize("kustomization", KUSTOMIZATIONS, ids=lambda p: str(p.parent.relative_to(DEPLOY)))
def test_every_kustomization_builds(kustomization: Path) -> None:
    """What `kubectl apply -k` would send: the build succeeds, each object once."""
    built = subprocess.run(
        ["kubectl", "kustomize", str(kustomization.parent)], capture_output=True, text=True, timeout=60
    )
    assert built.returncode == 0, built.stderr
    names = [
        (d["kind"], d["metadata"].get("namespace"), d["metadata"]["name"])
        for d in yaml.safe_load_all(built.stdout)
        if d
    ]
    assert names and len(names) == len(set(names)), names


def test_embedded_mmgate_configs_build_a_scheduler() -> None:
    found = 0
    for where, doc in documents():
        if doc["kind"] != "ConfigMap":
            continue
        for key, text in (doc.get("data") or {}).items():
            if key.endswith((".yaml", ".yml")) and key != ENVOY_KEY:
                config = parse_config(yaml.safe_load(text), source=f"{where}:{key}")
                build_scheduler(config.picker, mmgate=config.mmgate)
                found += 1
    assert found >= 1


READ = {  # what mmgate reads, by API group: the groups its code asks (kubernetes.py, objectives.py)
    "": {"pods"},
    POOL_GROUP: {"inferencepools"},
    OBJECTIVE_GROUP: {"inferenceobjectives"},
}


def test_rbac_only_reads_pods_pools_and_objectives_in_their_groups() -> None:
    roles = 0
    for where, doc in documents():
        if doc["kind"] not in ("Role", "ClusterRole"):
            continue
        granted: set[tuple[str, str]] = set()
        for rule in doc["rules"]:
            assert set(rule["verbs"]) == {"get", "list", "watch"}, where
            for group in rule["apiGroups"]:
                assert set(rule["resources"]) <= READ[group], (where, group)
                granted |= {(group, r) for r in rule["resources"]}
        if (POOL_GROUP, "inferencepools") in granted:  # discovery by pool: its objectives too
            assert (OBJECTIVE_GROUP, "inferenceobjectives") in granted, where
            roles += 1
    assert roles >= 1


def test_mmgate_containers_are_probed_and_not_root() -> None:
    seen = 0
    for where, doc in documents():
        if doc["kind"] != "Deployment":
            continue
        pod = doc["spec"]["template"]["spec"]
        for container in pod["containers"]:
            assert container.get("readinessProbe") and container.get("livenessProbe"), (
                f"{where} {container['name']}"
            )
            if container["image"].startswith("mmgate"):
                seen += 1
                assert pod["securityContext"]["runAsNonRoot"] is True, where
    assert seen >= 1


def test_dockerfile_installs_as_the_docs_say() -> None:
    dockerfile = (DEPLOY / "Dockerfile").read_text()
    steps = re.findall(r"pip install --no-cache-dir (\S+)", dockerfile)
    assert steps == ["'.[kubernetes,extproc]'"]
    for page in (REPO / "docs" / "kubernetes.md", REPO / "README.md"):
        assert "pip install '.[kubernetes,extproc]'" in page.read_text(), page
    assert re.search(r"^USER 10001$", dockerfile, re.M)


def _metric_names(expr: str) -> set[str]:
    names = set(re.findall(r"\b(mmgate_[a-z_]+)", expr))
    return {re.sub(r"_(bucket|total|sum|count)$", "", n) for n in names}


def test_dashboard_uses_only_metrics_the_gateway_exports() -> None:
    gateway = build_gateway(parse_config({}, source="<dashboard test>"))
    exported = {family.name for family in gateway.telemetry.registry.collect()}
    dashboard = json.loads((DEPLOY / "grafana" / "mmgate-dashboard.json").read_text())
    wanted: set[str] = set()
    for panel in dashboard["panels"]:
        for target in panel["targets"]:
            wanted |= _metric_names(target["expr"])
    assert wanted and wanted <= exported, sorted(wanted - exported)


def _pool_docs(part: str) -> list[dict[str, Any]]:
    """The objects `kubectl apply -k inferencepool/PART` applies: base/ and PART/."""
    dirs = tuple(f"{(POOL / d).relative_to(REPO)}/" for d in ("base", part))
    return [doc for where, doc in documents() if where.startswith(dirs)]


def _named(docs: list[dict[str, Any]], kind: str, name: str) -> dict[str, Any]:
    found = [d for d in docs if d["kind"] == kind and d["metadata"]["name"] == name]
    assert len(found) == 1, f"{kind}/{name}: {len(found)} found"
    return found[0]


def _selects(selector: dict[str, str], labels: dict[str, str]) -> bool:
    return bool(selector) and all(labels.get(k) == v for k, v in selector.items())


def _pickers(docs: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [
        d
        for d in docs
        if d["kind"] == "Deployment"
        and any(c.get("args", [""])[0] == "extproc" for c in d["spec"]["template"]["spec"]["containers"])
    ]


def _picker_container(deployment: dict[str, Any]) -> dict[str, Any]:
    containers: list[dict[str, Any]] = deployment["spec"]["template"]["spec"]["containers"]
    (container,) = [c for c in containers if c["args"][0] == "extproc"]
    return container


@pytest.mark.parametrize("part", PARTS)
def test_pool_pickers_are_replicated_probed_and_budgeted(part: str) -> None:
    docs = _pool_docs(part)
    (picker,) = _pickers(docs)
    assert picker["spec"]["replicas"] >= 2
    labels = picker["spec"]["template"]["metadata"]["labels"]
    container = _picker_container(picker)
    assert container["livenessProbe"]["grpc"]["service"] == "liveness"
    assert container["readinessProbe"]["grpc"]["service"] == "readiness"
    grpc_port = {p["name"]: p["containerPort"] for p in container["ports"]}["grpc"]
    assert container["readinessProbe"]["grpc"]["port"] == grpc_port
    assert container["args"][container["args"].index("--port") + 1] == str(grpc_port)
    # A terminating replica leaves the Services before it stops, within the grace period.
    grace = picker["spec"]["template"]["spec"].get("terminationGracePeriodSeconds", 30)
    for each in picker["spec"]["template"]["spec"]["containers"]:
        assert 0 < each["lifecycle"]["preStop"]["sleep"]["seconds"] < grace, each["name"]
    budgets = [d for d in docs if d["kind"] == "PodDisruptionBudget"]
    assert any(
        _selects(b["spec"]["selector"]["matchLabels"], labels)
        and b["spec"]["minAvailable"] < picker["spec"]["replicas"]
        for b in budgets
    )


@pytest.mark.parametrize("part", PARTS)
def test_pool_pickers_share_the_redis_the_manifests_run(part: str) -> None:
    docs = _pool_docs(part)
    (picker,) = _pickers(docs)
    config_map = next(
        v["configMap"]["name"] for v in picker["spec"]["template"]["spec"]["volumes"] if v["name"] == "config"
    )
    config = parse_config(yaml.safe_load(_named(docs, "ConfigMap", config_map)["data"]["config.yaml"]))
    assert config.mmgate.sharedIndex is not None
    url = urlsplit(config.mmgate.sharedIndex.redis)
    assert url.scheme == "redis"
    service = _named(docs, "Service", str(url.hostname))
    assert service["metadata"]["namespace"] == picker["metadata"]["namespace"]
    (port,) = [p for p in service["spec"]["ports"] if p["port"] == (url.port or 6379)]
    redis = [
        d
        for d in docs
        if d["kind"] == "Deployment"
        and _selects(service["spec"]["selector"], d["spec"]["template"]["metadata"]["labels"])
    ]
    assert len(redis) == 1
    (container,) = redis[0]["spec"]["template"]["spec"]["containers"]
    assert container["image"].startswith("redis:")
    assert port["targetPort"] in {p["name"] for p in container["ports"]}


@pytest.mark.parametrize("part", PARTS)
def test_the_pool_names_the_picker_service(part: str) -> None:
    docs = _pool_docs(part)
    (picker,) = _pickers(docs)
    pool = next(d for d in docs if d["kind"] == "InferencePool")
    assert pool["apiVersion"] == "inference.networking.k8s.io/v1"
    ref = pool["spec"]["endpointPickerRef"]
    service = _named(docs, "Service", ref["name"])
    assert _selects(service["spec"]["selector"], picker["spec"]["template"]["metadata"]["labels"])
    (port,) = [p for p in service["spec"]["ports"] if p["port"] == ref["portNumber"]["number"]]
    assert port["appProtocol"] == "kubernetes.io/h2c"
    assert port["targetPort"] == "grpc"
    assert ref["failureMode"] in ("FailOpen", "FailClose")
    config = yaml.safe_load(_named(docs, "ConfigMap", "mmgate-epp-config")["data"]["config.yaml"])
    assert config["mmgate"]["kubernetes"]["inferencePool"] == pool["metadata"]["name"]


def test_the_gateway_routes_to_the_pool() -> None:
    docs = _pool_docs("gateway")
    pool = next(d for d in docs if d["kind"] == "InferencePool")
    gateway = next(d for d in docs if d["kind"] == "Gateway")
    route = next(d for d in docs if d["kind"] == "HTTPRoute")
    assert [p["name"] for p in route["spec"]["parentRefs"]] == [gateway["metadata"]["name"]]
    backends = [b for rule in route["spec"]["rules"] for b in rule["backendRefs"]]
    assert backends == [
        {"group": "inference.networking.k8s.io", "kind": "InferencePool", "name": pool["metadata"]["name"]}
    ]


def _envoy_run_by(docs: list[dict[str, Any]], pod: dict[str, Any], container: dict[str, Any]) -> str:
    """The Envoy configuration ``container`` runs: its ConfigMap's text, the file ``-c`` names."""
    (mount,) = container["volumeMounts"]
    volume = next(v for v in pod["volumes"] if v["name"] == mount["name"])
    assert container["args"][container["args"].index("-c") + 1] == f"{mount['mountPath']}/{ENVOY_KEY}"
    text: str = _named(docs, "ConfigMap", volume["configMap"]["name"])["data"][ENVOY_KEY]
    return text


def _picker_cluster(envoy_config: dict[str, Any]) -> tuple[dict[str, Any], dict[str, Any]]:
    """The picker cluster of an Envoy configuration and the one address it lists."""
    (cluster,) = [c for c in envoy_config["static_resources"]["clusters"] if c["name"] == "mmgate_extproc"]
    (address,) = [
        e["endpoint"]["address"]["socket_address"]
        for group in cluster["load_assignment"]["endpoints"]
        for e in group["lb_endpoints"]
    ]
    return cluster, address


def _serves_clients(docs: list[dict[str, Any]], envoy_config: dict[str, Any], pods: dict[str, Any]) -> None:
    """The Service mmgate-envoy reaches the Envoy container of ``pods`` (a Deployment) on its
    listener's port."""
    listener = envoy_config["static_resources"]["listeners"][0]["address"]["socket_address"]["port_value"]
    (envoy,) = [c for c in pods["spec"]["template"]["spec"]["containers"] if c["name"] == "envoy"]
    assert {p["name"]: p["containerPort"] for p in envoy["ports"]}["http"] == listener
    service = _named(docs, "Service", "mmgate-envoy")
    assert _selects(service["spec"]["selector"], pods["spec"]["template"]["metadata"]["labels"])
    assert [p["targetPort"] for p in service["spec"]["ports"]] == ["http"]


def test_the_standalone_envoy_is_llm_d_original_dst_config_beside_each_picker() -> None:
    docs = _pool_docs("envoy")
    assert not [d for d in docs if d["kind"] in ("Gateway", "HTTPRoute")]
    (picker,) = _pickers(docs)
    pod = picker["spec"]["template"]["spec"]
    (envoy,) = [c for c in pod["containers"] if c["name"] == "envoy"]
    shipped = _envoy_run_by(docs, pod, envoy)
    assert shipped == (DEPLOY / "envoy" / "envoy-original-dst.yaml").read_text()
    # The Envoy reaches its picker on the pod's loopback, at the port the picker serves.
    envoy_config = yaml.safe_load(shipped)
    _, address = _picker_cluster(envoy_config)
    picker_ports = {p["name"]: p["containerPort"] for p in _picker_container(picker)["ports"]}
    assert (address["address"], address["port_value"]) == ("127.0.0.1", picker_ports["grpc"])
    _serves_clients(docs, envoy_config, picker)


def test_one_envoy_in_front_finds_every_picker_replica_through_a_headless_service() -> None:
    docs = _pool_docs("envoy-front")
    assert not [d for d in docs if d["kind"] in ("Gateway", "HTTPRoute")]
    (picker,) = _pickers(docs)
    envoy = _named(docs, "Deployment", "mmgate-envoy")
    assert envoy["spec"]["replicas"] >= 2
    pod = envoy["spec"]["template"]["spec"]
    (container,) = pod["containers"]
    shipped = _envoy_run_by(docs, pod, container)
    assert shipped == (DEPLOY / "envoy" / "envoy-pickers.yaml").read_text()
    # The picker cluster resolves the headless Service (one host per ready replica), health-checked.
    envoy_config = yaml.safe_load(shipped)
    cluster, address = _picker_cluster(envoy_config)
    assert cluster["type"] == "STRICT_DNS" and cluster["health_checks"]
    headless = _named(docs, "Service", "mmgate-epp-pods")
    assert headless["spec"]["clusterIP"] == "None"
    assert _selects(headless["spec"]["selector"], picker["spec"]["template"]["metadata"]["labels"])
    namespace = headless["metadata"]["namespace"]
    assert address["address"] == f"mmgate-epp-pods.{namespace}.svc.cluster.local"
    picker_ports = {p["name"]: p["containerPort"] for p in _picker_container(picker)["ports"]}
    (port,) = headless["spec"]["ports"]
    assert port["targetPort"] == "grpc" and address["port_value"] == port["port"] == picker_ports["grpc"]
    _serves_clients(docs, envoy_config, envoy)


def test_every_way_runs_the_same_picker_container() -> None:
    (gateway,) = _pickers(_pool_docs("gateway"))
    for part in PARTS[1:]:
        (other,) = _pickers(_pool_docs(part))
        assert _picker_container(gateway) == _picker_container(other), part
        assert gateway["spec"]["replicas"] == other["spec"]["replicas"], part
