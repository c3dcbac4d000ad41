"""The replay cache: bounded by bytes, least recently used out first, and never answering
for an effect the ledger may already have pruned."""

from __future__ import annotations

import dataclasses
import uuid
from datetime import UTC, datetime, timedelta

from effect_broker.answers.receipts import (
    ENTRY_OVERHEAD,
    ReceiptCache,
    SettledReplay,
    prunable_at,
)
from effect_broker.engine import StoredResponse
from effect_broker.models import Effect, EffectStatus, ReceiptSource, SafetyClass

NOW = datetime(2026, 1, 1, tzinfo=UTC)
EFFECT = Effect(
    effect_id=uuid.uuid4(), tenant_id="acme", operation_key="k", request_hash="h",
    route="charge", contract_name="c", contract_version="1",
    safety=SafetyClass.IDEMPOTENT, downstream_key="dk", status=EffectStatus.SUCCEEDED,
    version=3, attempts=1, lease_owner=None, lease_expires_at=None, due_at=None,
    first_dispatched_at=NOW, retention_deadline=None, settlement_deadline=None,
    request_ciphertext=None, request_preview={}, last_error=None, created_at=NOW,
    updated_at=NOW,
)  # fmt: skip


RETENTION = timedelta(days=7)


def entry(key: str, body_bytes: int = 100) -> SettledReplay:
    effect = dataclasses.replace(EFFECT, operation_key=key)
    response = StoredResponse(201, "Created", [], b"x" * body_bytes)
    return SettledReplay(
        effect, response, ReceiptSource.RESPONSE, prunable_at(effect, RETENTION)
    )


def get(cache: ReceiptCache, tenant: str, key: str) -> SettledReplay | None:
    return cache.get(tenant, key, now=NOW)


def test_a_cached_receipt_is_found_by_tenant_and_key() -> None:
    cache = ReceiptCache(max_bytes=10_000)
    cache.put(entry("a"))

    found = get(cache, "acme", "a")

    assert found is not None and found.response.body == b"x" * 100
    assert get(cache, "globex", "a") is None
    assert get(cache, "acme", "b") is None


def test_the_least_recently_used_entry_goes_first() -> None:
    size = ENTRY_OVERHEAD + 100
    cache = ReceiptCache(max_bytes=size * 8)
    for key in "abcdefgh":
        cache.put(entry(key))
    assert get(cache, "acme", "a") is not None  # a is now the most recent

    cache.put(entry("i"))

    assert len(cache) == 8
    assert get(cache, "acme", "b") is None
    assert get(cache, "acme", "a") is not None


def test_a_body_too_large_for_its_share_is_not_kept() -> None:
    cache = ReceiptCache(max_bytes=8_000)
    cache.put(entry("small"))
    cache.put(entry("large", body_bytes=2_000))

    assert get(cache, "acme", "large") is None
    assert get(cache, "acme", "small") is not None


def test_a_zero_budget_keeps_nothing() -> None:
    cache = ReceiptCache(max_bytes=0)
    cache.put(entry("a"))
    assert len(cache) == 0


def test_an_entry_expires_when_the_ledger_may_prune_its_effect() -> None:
    cache = ReceiptCache(max_bytes=10_000)
    cache.put(entry("a"))

    assert cache.get("acme", "a", now=NOW + RETENTION - timedelta(seconds=1))
    assert cache.get("acme", "a", now=NOW + RETENTION) is None
    assert len(cache) == 0  # dropped, and its bytes with it
    cache.put(entry("a"))
    assert len(cache) == 1


def test_the_key_retention_holds_an_entry_as_it_holds_the_ledger_row() -> None:
    later = NOW + RETENTION + timedelta(days=3)
    effect = dataclasses.replace(EFFECT, retention_deadline=later)

    assert prunable_at(effect, RETENTION) == later
    assert prunable_at(EFFECT, RETENTION) == NOW + RETENTION
