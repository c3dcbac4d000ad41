"""routes.schema.json: current, printed by the CLI, and in agreement with the loader."""

from __future__ import annotations

import json
import os
import textwrap
from pathlib import Path
from typing import Any

import jsonschema
import pytest
import yaml
from typer.testing import CliRunner

from effect_broker.cli import _register, app
from effect_broker.config.routes_file import load_routes, parse_routes
from effect_broker.config.routes_schema import (
    REGENERATE,
    SCHEMA_FILE,
    render_routes_schema,
)
from effect_broker.errors import ConfigError

ROOT = Path(__file__).resolve().parents[2]
ROUTES_FILES = [
    ROOT / "routes.yaml",
    *sorted((ROOT / "examples").rglob("*routes*.yaml")),
]

_register()


def published() -> dict[str, Any]:
    schema: dict[str, Any] = json.loads((ROOT / SCHEMA_FILE).read_text("utf-8"))
    return schema


def validator() -> jsonschema.Draft202012Validator:
    return jsonschema.Draft202012Validator(published())


def test_the_committed_schema_is_current() -> None:
    committed = (ROOT / SCHEMA_FILE).read_text("utf-8")
    assert committed == render_routes_schema(), (
        f"{SCHEMA_FILE} is stale: regenerate it from the models with `{REGENERATE}`"
    )


def test_the_cli_prints_the_committed_schema() -> None:
    result = CliRunner().invoke(app, ["routes", "schema"])
    assert result.exit_code == 0, result.output
    assert result.stdout == (ROOT / SCHEMA_FILE).read_text("utf-8")


def test_the_published_schema_is_a_valid_draft_2020_12_schema() -> None:
    schema = published()
    jsonschema.Draft202012Validator.check_schema(schema)
    assert schema["$schema"] == "https://json-schema.org/draft/2020-12/schema"
    assert set(schema["required"]) == {"version", "contracts", "routes"}


def test_there_are_example_routes_files_to_check() -> None:
    names = {path.relative_to(ROOT).as_posix() for path in ROUTES_FILES}
    assert {"routes.yaml", "examples/stripe-routes.yaml"} <= names


@pytest.mark.parametrize("path", ROUTES_FILES, ids=lambda path: path.name)
def test_routes_files_validate_against_the_schema_and_name_it(path: Path) -> None:
    validator().validate(yaml.safe_load(path.read_text("utf-8")))
    load_routes(path)  # and the loader agrees
    first_line = path.read_text("utf-8").splitlines()[0]
    target = Path(os.path.relpath(ROOT / SCHEMA_FILE, path.parent)).as_posix()
    expected = target if target.startswith("../") else f"./{target}"
    assert first_line == f"# yaml-language-server: $schema={expected}"


VALID = """\
version: 1
contracts:
  - name: pay
    version: "1"
    safety: idempotent
    idempotency_header: Idempotency-Key
    key_retention: 24h
routes:
  - name: charge
    match: {method: POST, path: /pay/v1/charges}
    strip_prefix: /pay
    upstream: https://pay.example
    contract: pay
    inject_headers: {Authorization: "Bearer ${env:PAY_KEY}"}
"""


@pytest.mark.parametrize(
    ("old", "new"),
    [
        ("version: 1\n", "version: 2\n"),
        ("key_retention: 24h", "key_retention: 1.5h"),
        ("key_retention: 24h", "key_retention: 24h\n    settlement_bound: 2s"),
        ("safety: idempotent", "safety: sometimes"),
        ("Idempotency-Key", "Idempotency Key"),
        ("method: POST", "method: []"),
        ("path: /pay/v1/charges", "path: pay/v1/charges"),
        ("upstream: https://pay.example", "upstream: ftp://pay.example"),
        ("strip_prefix: /pay", "strip_prefix: pay"),
        ("name: charge", "name: -charge"),
        ("Authorization:", "Bad Header:"),
        ("contract: pay", "contract: pay\n    upstream_timeout: 1s"),
        ("upstream: https://pay.example", "upstream:"),
    ],
)
def test_the_schema_and_the_loader_refuse_the_same_mistakes(old: str, new: str) -> None:
    """An editor using the schema flags what `routes validate` would refuse."""
    parse_routes(VALID, source="valid.yaml")
    assert validator().is_valid(yaml.safe_load(VALID))
    broken = VALID.replace(old, new, 1)
    assert broken != VALID
    with pytest.raises(ConfigError):
        parse_routes(broken, source="broken.yaml")
    assert not validator().is_valid(yaml.safe_load(broken)), textwrap.indent(broken, "  ")


def test_schema_defaults_are_written_as_in_a_routes_file() -> None:
    contract = published()["$defs"]["UnsafeContract"]["properties"]
    assert contract["timeout"]["default"] == "10s"
    assert contract["retry_limit"]["default"] == 5
    route = published()["$defs"]["RouteSection"]["properties"]
    assert "default" not in route["upstream"]  # optional, but null is refused
    assert route["inject_headers"]["propertyNames"]["pattern"].startswith("^[")
