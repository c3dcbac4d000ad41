"""routes.yaml texts and parsing helpers shared by the unit tests of the routes file."""

from __future__ import annotations

import textwrap

import pytest

from effect_broker.config.contracts import Contract
from effect_broker.config.routes_config import RoutesConfig
from effect_broker.config.routes_file import (
    parse_routes,
)
from effect_broker.errors import ConfigError, ConfigIssue
from effect_broker.models import SafetyClass

CONTRACT = Contract(name="c", version="1", safety=SafetyClass.UNSAFE)


def parse(text: str) -> RoutesConfig:
    return parse_routes(textwrap.dedent(text), source="r.yaml")


def issues_of(text: str) -> list[ConfigIssue]:
    with pytest.raises(ConfigError) as caught:
        parse(text)
    assert all(issue.file == "r.yaml" for issue in caught.value.issues)
    return caught.value.issues


def only_issue(text: str) -> ConfigIssue:
    found = issues_of(text)
    assert len(found) == 1, [str(issue) for issue in found]
    return found[0]


# A valid file the route tests extend: contracts at lines 3, 8, 17; routes from line 21.
CONTRACTS = """\
version: 1
contracts:
  - name: pay
    version: "1"
    safety: idempotent
    idempotency_header: Idempotency-Key
    key_retention: 24h
  - name: tickets
    version: "3"
    safety: reconcilable
    correlation_header: X-Correlation-Id
    settlement_bound: 2s
    probe:
      path: /v1/tickets?correlation_id={downstream_key}
      found: {status: [200], external_id: /id}
      absent: {status: 404}
  - name: email
    version: "1"
    safety: unsafe
"""
