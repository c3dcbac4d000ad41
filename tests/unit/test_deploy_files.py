"""No Docker engine runs in CI, so the deployment files are checked by reading them."""

from __future__ import annotations

import re

import yaml

from effect_broker.config.routes_file import load_routes, parse_routes
from tests.support import ROOT


def test_the_compose_routes_file_is_valid() -> None:
    config = load_routes(ROOT / "deploy" / "routes.compose.yaml")
    assert all("payment-target:9000" in (r.upstream or "") for r in config.routes)


def test_the_kubernetes_sidecar_routes_are_valid() -> None:
    documents = list(
        yaml.safe_load_all((ROOT / "deploy/kubernetes/sidecar.yaml").read_text())
    )
    [config_map] = [d for d in documents if d["kind"] == "ConfigMap"]
    config = parse_routes(config_map["data"]["routes.yaml"], source="sidecar.yaml")
    assert [route.name for route in config.routes] == ["charge"]


def test_compose_serves_the_mounted_routes_and_needs_a_master_key() -> None:
    compose = yaml.safe_load((ROOT / "docker-compose.yml").read_text())
    broker = compose["services"]["broker"]
    assert (
        broker["environment"]["EFFECT_BROKER_ROUTES"] == "/app/deploy/routes.compose.yaml"
    )
    assert ":?" in broker["environment"]["EFFECT_BROKER_MASTER_KEY"]
    assert compose["services"]["migrate"]["command"] == ["migrate"]


def test_every_path_the_dockerfile_copies_exists() -> None:
    dockerfile = (ROOT / "Dockerfile").read_text()
    sources = re.findall(r"^COPY (?:--chown=\S+ )?(?!--from)(.+?) \S+$", dockerfile, re.M)
    copied = [path for line in sources for path in line.split()]
    assert copied, "the Dockerfile copies nothing?"
    for path in copied:
        assert (ROOT / path).exists(), path
    assert "USER broker" in dockerfile
