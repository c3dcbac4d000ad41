"""routes.yaml's ledger_retention: how long settled effects stay in the ledger."""

from __future__ import annotations

from datetime import timedelta

from tests.unit.routes_support import CONTRACTS, only_issue, parse


def test_the_default_keeps_a_week_or_the_key_retention_when_longer() -> None:
    config = parse(CONTRACTS + "routes: []\n")
    assert config.contracts["pay"].ledger_retention == timedelta(days=7)
    assert config.contracts["email"].ledger_retention == timedelta(days=7)

    long_keys = CONTRACTS.replace("key_retention: 24h", "key_retention: 30d")
    assert parse(long_keys + "routes: []\n").contracts["pay"].ledger_retention == (
        timedelta(days=30)
    )


def test_a_ledger_retention_is_read() -> None:
    text = CONTRACTS.replace(
        "key_retention: 24h", "key_retention: 24h\n    ledger_retention: 48h"
    )
    assert parse(text + "routes: []\n").contracts["pay"].ledger_retention == (
        timedelta(hours=48)
    )


def test_a_ledger_retention_shorter_than_the_key_retention_is_refused() -> None:
    text = CONTRACTS.replace(
        "key_retention: 24h", "key_retention: 24h\n    ledger_retention: 12h"
    )
    issue = only_issue(text + "routes: []\n")
    assert (issue.file, issue.line) == ("r.yaml", 8)
    assert issue.field == "contracts[0].ledger_retention"
    assert "must not be shorter than key_retention" in issue.message
    assert str(issue).startswith("r.yaml:8")
