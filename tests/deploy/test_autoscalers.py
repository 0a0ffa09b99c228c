"""The HorizontalPodAutoscalers in deploy/ fit what they scale and what they scale on: the schema
check (test_manifests.py) passes an autoscaler of a Deployment that does not exist, or on a
metric the gateway never exports, and either would leave a tier at its replica count for good."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

from mmgate.config import parse_config
from support.processes import REPO

DEPLOY = REPO / "deploy" / "kubernetes"
ROLE_LABEL = "llm-d.ai/role"
TIER_METRIC = "mmgate_tier_desired_replicas"  # gateway/telemetry.py's per-role replicas signal
SIGNALS = "adaptive-encode-decider"  # the plugin whose tier demand the gateway exports


def folder_documents(folder: Path) -> list[dict[str, Any]]:
    return [
        doc
        for path in sorted(folder.glob("*.yaml"))
        if path.name != "kustomization.yaml"
        for doc in yaml.safe_load_all(path.read_text())
        if doc
    ]


def autoscaled_folders() -> list[Path]:
    return sorted(
        {p.parent for p in DEPLOY.rglob("*.yaml") if "kind: HorizontalPodAutoscaler" in p.read_text()}
    )


def test_there_are_tier_autoscalers() -> None:
    assert DEPLOY / "e-pd" in autoscaled_folders()


def test_each_autoscaler_scales_a_deployment_of_the_role_its_metric_names() -> None:
    for folder in autoscaled_folders():
        docs = folder_documents(folder)
        deployments = {
            (d["metadata"].get("namespace"), d["metadata"]["name"]): d
            for d in docs
            if d["kind"] == "Deployment"
        }
        for hpa in (d for d in docs if d["kind"] == "HorizontalPodAutoscaler"):
            where = f"{folder.name}/{hpa['metadata']['name']}"
            ref = hpa["spec"]["scaleTargetRef"]
            assert ref["kind"] == "Deployment", where
            target = deployments.get((hpa["metadata"].get("namespace"), ref["name"]))
            assert target is not None, f"{where}: no Deployment {ref['name']} in its namespace"
            role = target["spec"]["template"]["metadata"]["labels"][ROLE_LABEL]
            for metric in hpa["spec"]["metrics"]:
                assert metric["type"] == "External", where
                external = metric["external"]
                assert external["metric"]["name"] == TIER_METRIC, where
                assert external["metric"]["selector"]["matchLabels"] == {"role": role}, where
                assert external["target"] == {"type": "AverageValue", "averageValue": "1"}, where


def test_the_gateway_beside_the_autoscalers_exports_the_tier_signals() -> None:
    """The gateway config deployed with them runs the plugin the signals come from."""
    for folder in autoscaled_folders():
        configs = [
            parse_config(yaml.safe_load(text), source=key)
            for doc in folder_documents(folder)
            if doc["kind"] == "ConfigMap"
            for key, text in (doc.get("data") or {}).items()
            if key.endswith((".yaml", ".yml")) and key != "envoy.yaml"  # an Envoy config, not the gateway's
        ]
        assert configs, folder
        assert all(any(p.type == SIGNALS for p in c.picker.plugins) for c in configs), folder
