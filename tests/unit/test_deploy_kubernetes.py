"""deploy/kubernetes/ checked without a cluster.

Every manifest is validated against the Kubernetes OpenAPI-derived JSON schemas that
``kubernetes-validate`` ships (strict: unknown fields fail, so a typo cannot pass
silently), for the oldest release with native sidecars on by default and the newest
the package knows. The rest are what a schema cannot know: the broker is a native
sidecar, every container is bounded, pods run as a numeric non-root user, and the
probes ask paths the admin app really serves.
"""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any, cast

import kubernetes_validate
import pytest
import yaml

from effect_broker.admin.app import build_admin_app
from effect_broker.config.routes_file import parse_routes
from tests.support import ROOT

MANIFESTS = sorted((ROOT / "deploy" / "kubernetes").glob("*.yaml"))
# 1.29: native sidecars (SidecarContainers) on by default; the newest the package ships.
VERSIONS = ["1.29.0", kubernetes_validate.utils.latest_version()]
PROXY = "http://127.0.0.1:8080"
NO_PROXY = {"localhost", "127.0.0.1", ".svc", ".cluster.local"}


def documents(path: Path) -> list[dict[str, Any]]:
    return [doc for doc in yaml.safe_load_all(path.read_text()) if doc]


def all_documents() -> list[dict[str, Any]]:
    return [doc for path in MANIFESTS for doc in documents(path)]


def one(kind: str, file: str) -> dict[str, Any]:
    path = ROOT / "deploy" / "kubernetes" / file
    [found] = [doc for doc in documents(path) if doc["kind"] == kind]
    return found


def pod_specs() -> list[tuple[str, dict[str, Any]]]:
    return [
        (doc["metadata"]["name"], doc["spec"]["template"]["spec"])
        for doc in all_documents()
        if doc["kind"] in {"Deployment", "Job"}
    ]


def containers(spec: dict[str, Any]) -> list[dict[str, Any]]:
    return [*spec.get("initContainers", []), *spec["containers"]]


def env(container: dict[str, Any]) -> dict[str, Any]:
    return {
        item["name"]: item.get("value", item.get("valueFrom"))
        for item in container["env"]
    }


def test_the_expected_manifests_exist() -> None:
    kinds = {(doc["kind"], doc["metadata"]["name"]) for doc in all_documents()}
    assert {
        ("Secret", "effect-broker"),
        ("Job", "effect-broker-migrate"),
        ("Deployment", "agent"),
        ("Deployment", "effect-broker-gateway"),
        ("Service", "effect-broker-gateway"),
        ("PodDisruptionBudget", "effect-broker-gateway"),
    } <= kinds


@pytest.mark.parametrize("version", VERSIONS)
@pytest.mark.parametrize("path", MANIFESTS, ids=lambda path: path.name)
def test_every_manifest_matches_the_kubernetes_schema(path: Path, version: str) -> None:
    for document in documents(path):
        kubernetes_validate.validate(document, version, strict=True)


def test_the_schema_check_rejects_a_misspelt_field_and_a_named_user() -> None:
    deployment = copy.deepcopy(one("Deployment", "sidecar.yaml"))
    pod = deployment["spec"]["template"]["spec"]
    sidecar = pod["initContainers"][0]
    sidecar["startupprobe"] = sidecar.pop("startupProbe")
    with pytest.raises(kubernetes_validate.ValidationError):
        kubernetes_validate.validate(deployment, VERSIONS[-1], strict=True)
    sidecar["startupProbe"] = sidecar.pop("startupprobe")
    pod["securityContext"]["runAsUser"] = "broker"
    with pytest.raises(kubernetes_validate.ValidationError):
        kubernetes_validate.validate(deployment, VERSIONS[-1], strict=True)


def test_the_broker_is_a_native_sidecar_ready_before_the_agent() -> None:
    spec = one("Deployment", "sidecar.yaml")["spec"]["template"]["spec"]
    [broker] = spec["initContainers"]
    assert broker["restartPolicy"] == "Always"
    assert broker["startupProbe"]["httpGet"]["path"] == "/readyz"
    admin_ports = {port["name"]: port["containerPort"] for port in broker["ports"]}
    assert broker["startupProbe"]["httpGet"]["port"] == "admin"
    assert env(broker)["EFFECT_BROKER_ADMIN_LISTEN"].endswith(f":{admin_ports['admin']}")
    assert all(c["name"] != "effect-broker" for c in spec["containers"])


def test_the_agent_sends_through_the_sidecar_in_both_spellings() -> None:
    spec = one("Deployment", "sidecar.yaml")["spec"]["template"]["spec"]
    [agent] = spec["containers"]
    variables = env(agent)
    for name in ("HTTP_PROXY", "http_proxy", "HTTPS_PROXY", "https_proxy"):
        assert variables[name] == PROXY, name
    for name in ("NO_PROXY", "no_proxy"):
        assert set(variables[name].split(",")) >= NO_PROXY, name
    [broker] = spec["initContainers"]
    assert PROXY.endswith(env(broker)["EFFECT_BROKER_LISTEN"])


@pytest.mark.parametrize("name,spec", pod_specs(), ids=[n for n, _ in pod_specs()])
def test_every_container_has_requests_and_limits(name: str, spec: dict[str, Any]) -> None:
    for container in containers(spec):
        resources = container["resources"]
        for bound in ("requests", "limits"):
            assert {"cpu", "memory"} <= set(resources[bound]), (name, container["name"])


@pytest.mark.parametrize("name,spec", pod_specs(), ids=[n for n, _ in pod_specs()])
def test_every_pod_runs_as_a_numeric_non_root_user(
    name: str, spec: dict[str, Any]
) -> None:
    pod = spec["securityContext"]
    assert pod["runAsNonRoot"] is True
    assert isinstance(pod["runAsUser"], int) and pod["runAsUser"] != 0
    dockerfile = (ROOT / "Dockerfile").read_text()
    assert f"USER {pod['runAsUser']}" in dockerfile
    for container in containers(spec):
        assert container["securityContext"]["allowPrivilegeEscalation"] is False


def test_probes_ask_paths_the_admin_api_serves() -> None:
    app = build_admin_app(cast(Any, None), admin_token="t")
    served = {resource.canonical for resource in app.router.resources()}
    probed = set()
    for _, spec in pod_specs():
        for container in containers(spec):
            for probe in ("startupProbe", "readinessProbe", "livenessProbe"):
                if probe in container:
                    probed.add(container[probe]["httpGet"]["path"])
    assert probed == {"/healthz", "/readyz"}
    assert probed <= served


def test_pods_read_secrets_that_the_secret_example_defines() -> None:
    defined = set(one("Secret", "secret.yaml")["stringData"])
    for _, spec in pod_specs():
        for container in containers(spec):
            for item in container.get("env", []):
                if ref := item.get("valueFrom", {}).get("secretKeyRef"):
                    assert ref["name"] == "effect-broker"
                    assert ref["key"] in defined


def test_the_migrate_job_migrates() -> None:
    spec = one("Job", "migrate-job.yaml")["spec"]["template"]["spec"]
    [container] = spec["containers"]
    assert container["args"] == ["migrate"]
    assert "EFFECT_BROKER_DATABASE_URL" in env(container)


def test_the_gateway_is_a_gateway_behind_a_service_and_a_budget() -> None:
    deployment = one("Deployment", "gateway.yaml")
    [broker] = deployment["spec"]["template"]["spec"]["containers"]
    assert env(broker)["EFFECT_BROKER_GATEWAY"] == "true"
    assert deployment["spec"]["replicas"] >= 2
    labels = deployment["spec"]["template"]["metadata"]["labels"]
    service = one("Service", "gateway.yaml")
    budget = one("PodDisruptionBudget", "gateway.yaml")
    assert service["spec"]["selector"].items() <= labels.items()
    assert budget["spec"]["selector"]["matchLabels"].items() <= labels.items()
    assert budget["spec"]["minAvailable"] < deployment["spec"]["replicas"]


@pytest.mark.parametrize("file", ["sidecar.yaml", "gateway.yaml"])
def test_the_mounted_routes_are_valid(file: str) -> None:
    config_map = one("ConfigMap", file)
    config = parse_routes(config_map["data"]["routes.yaml"], source=file)
    assert [route.name for route in config.routes] == ["charge"]


GUIDE = "docs/how-to/kubernetes.md"


def test_the_guide_has_the_kubectl_line_of_the_secret_example() -> None:
    comment = (ROOT / "deploy/kubernetes/secret.yaml").read_text()
    readme = (ROOT / GUIDE).read_text()
    line = "kubectl create secret generic effect-broker"
    assert line in comment and line in readme
    for key in one("Secret", "secret.yaml")["stringData"]:
        assert f"--from-literal={key}=" in comment
        assert f"--from-literal={key}=" in readme


def mounted_volume(spec: dict[str, Any], container: dict[str, Any], path: str) -> Any:
    """The pod volume a container sees ``path`` in, or None when nothing is mounted."""
    volumes = {volume["name"]: volume for volume in spec["volumes"]}
    for mount in container.get("volumeMounts", []):
        if path.startswith(mount["mountPath"].rstrip("/") + "/"):
            return volumes[mount["name"]]
    return None


def test_the_sidecar_intercepts_https_with_a_ca_only_the_broker_can_read() -> None:
    spec = one("Deployment", "sidecar.yaml")["spec"]["template"]["spec"]
    [broker], [agent] = spec["initContainers"], spec["containers"]
    settings = env(broker)
    cert, key = settings["EFFECT_BROKER_CA_CERT"], settings["EFFECT_BROKER_CA_KEY"]
    # `kubectl create secret tls` names the files tls.crt and tls.key.
    assert cert.endswith("/tls.crt") and key.endswith("/tls.key")
    ca = mounted_volume(spec, broker, key)
    assert ca["secret"]["secretName"] == "effect-broker-ca"
    assert ca["secret"]["defaultMode"] & 0o007 == 0, "the CA key is world-readable"
    assert spec["securityContext"]["fsGroup"] == spec["securityContext"]["runAsGroup"]
    assert mounted_volume(spec, broker, cert) == ca
    # The agent trusts the CA's certificate and never sees its key.
    assert all(mount["name"] != "ca" for mount in agent["volumeMounts"])
    trust = env(agent)
    for name in ("SSL_CERT_FILE", "REQUESTS_CA_BUNDLE", "CURL_CA_BUNDLE"):
        assert trust[name].endswith("/ca-bundle.pem"), name
        volume = mounted_volume(spec, agent, trust[name])
        assert volume["configMap"]["name"] == "effect-broker-ca-trust", name
    assert mounted_volume(spec, agent, trust["NODE_EXTRA_CA_CERTS"]) == volume


def test_the_guide_creates_the_ca_secret_and_trust_config_map_of_the_sidecar() -> None:
    readme = (ROOT / GUIDE).read_text()
    assert "kubectl create secret tls effect-broker-ca" in readme
    assert "kubectl create configmap effect-broker-ca-trust" in readme
    for name in ("ca.pem", "ca-bundle.pem"):
        assert f"--from-file={name}=" in readme, name
