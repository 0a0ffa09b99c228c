"""What users apply from deploy/: every manifest valid, every embedded config loadable, the
Dockerfile's install step the documented one, and the dashboard asking only for real metrics.

Built-in kinds are validated against the Kubernetes OpenAPI schemas shipped in the
``kubernetes-validate`` package (offline, strict: unknown fields are errors). Custom resources
(InferencePool, Gateway, HTTPRoute, ServiceMonitor) have no schema there; they are checked for
their required fields here, and an InferencePool is read by the very code the gateway reads it with.
"""

from __future__ import annotations

import json
import re
from typing import Any

import kubernetes_validate
import pytest
import yaml

from mmgate.config import parse_config
from mmgate.datalayer.kubernetes import pool_target
from mmgate.gateway.app import build_gateway
from mmgate.scheduling import build_scheduler
from support.processes import REPO

DEPLOY = REPO / "deploy"
MANIFESTS = sorted(p for p in (DEPLOY / "kubernetes").rglob("*.yaml") if p.name != "kustomization.yaml")
K8S_VERSION = kubernetes_validate.latest_version()

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


def test_every_kustomization_lists_its_files() -> None:
    for kustomization in (DEPLOY / "kubernetes").rglob("kustomization.yaml"):
        listed = set(yaml.safe_load(kustomization.read_text())["resources"])
        present = {p.name for p in kustomization.parent.glob("*.yaml") if p.name != "kustomization.yaml"}
        assert listed == present, kustomization


def test_embedded_mmgate_configs_build_a_scheduler() -> None:
    found = 0
    for where, doc in documents():
        if doc["kind"] != "ConfigMap":
            continue
        for key, text in (doc.get("data") or {}).items():
            if key.endswith((".yaml", ".yml")):
                config = parse_config(yaml.safe_load(text), source=f"{where}:{key}")
                build_scheduler(config.picker, mmgate=config.mmgate)
                found += 1
    assert found >= 1


def test_rbac_only_reads_pods_and_pools() -> None:
    for where, doc in documents():
        if doc["kind"] not in ("Role", "ClusterRole"):
            continue
        for rule in doc["rules"]:
            assert set(rule["verbs"]) <= {"get", "list", "watch"}, where
            assert set(rule["resources"]) <= {"pods", "inferencepools"}, where


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
