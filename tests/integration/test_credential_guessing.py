"""Guessing gateway credentials: a small budget per peer, then 429 without a lookup.

Every wrong ``Proxy-Authorization`` used to cost a ledger query (an unknown key id is
looked up each time), with no limit: guesses became database load. Now each peer may be
wrong a few times; past that it gets ``429`` with ``Retry-After`` before anything is
looked up, for plain requests and CONNECT alike. A tenant whose key is live is not
slowed down.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import pytest

from effect_broker.credential_budget import CredentialBudget
from effect_broker.store import Store
from effect_broker.tenancy import new_api_key
from tests.integration.gateway_support import basic, charge, make_key
from tests.integration.harness import PROBLEMS, address, request, running_broker
from tests.integration.tls_support import TlsWorld

BURST = 5


def count_lookups(store: Store, monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """Key ids the resolver asked the ledger about, from now on."""
    asked: list[str] = []
    lookup: Callable[[str], Awaitable[Any]] = store.api_key

    async def counted(key_id: str) -> Any:
        asked.append(key_id)
        return await lookup(key_id)

    monkeypatch.setattr(store, "api_key", counted)
    return asked


def guess(n: int) -> str:
    """A well-formed key nobody was given: each costs a lookup unless refused first."""
    return basic("acme", f"ebk_{n:012x}_{'s' * 43}")


async def test_wrong_proxy_credentials_get_429_past_the_budget_without_a_lookup(
    database_url: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    async with running_broker(database_url, tmp_path, gateway=True) as broker:
        gateway = broker.state.gateway
        assert gateway is not None
        gateway.budget = CredentialBudget(burst=BURST, per_second=0.01)
        live = await make_key(broker.state.store, "acme")
        assert (await charge(broker.proxy_url, basic("acme", live))).status == 201
        asked = count_lookups(broker.state.store, monkeypatch)

        answers = [await charge(broker.proxy_url, guess(n)) for n in range(3 * BURST)]

        assert [a.status for a in answers] == [407] * BURST + [429] * (2 * BURST)
        assert len(asked) == BURST
        limited = answers[-1]
        assert limited.content_type == "application/problem+json"
        assert int(limited.headers["Retry-After"]) >= 1
        # A key already seen live is answered from memory: never budgeted.
        assert (await charge(broker.proxy_url, basic("acme", live))).status == 201
        assert len(asked) == BURST


async def test_wrong_connect_credentials_get_429_past_the_budget_without_a_lookup(
    database_url: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    world = TlsWorld(tmp_path)
    async with running_broker(
        database_url, tmp_path, gateway=True, **world.settings()
    ) as broker:
        gateway = broker.state.gateway
        assert gateway is not None
        gateway.budget = CredentialBudget(burst=BURST, per_second=0.01)
        key = new_api_key()
        await broker.state.store.add_api_key("acme", key.key_id, key.secret_hash)
        asked = count_lookups(broker.state.store, monkeypatch)

        heads, bodies = [], []
        for n in range(2 * BURST):
            reader, writer = await asyncio.open_connection(*address(broker.proxy_url))
            try:
                writer.write(
                    b"CONNECT payments.internal:443 HTTP/1.1\r\nHost: x\r\n"
                    b"Proxy-Authorization: " + guess(n).encode() + b"\r\n\r\n"
                )
                async with asyncio.timeout(10):
                    head, _, body = (await reader.read()).partition(b"\r\n\r\n")
            finally:
                writer.close()
            heads.append(head)
            bodies.append(body)

        statuses = [int(head.split(b" ", 2)[1]) for head in heads]
        assert statuses == [407] * BURST + [429] * BURST
        assert len(asked) == BURST
        assert b"Retry-After: " in heads[-1]
        assert json.loads(bodies[-1])["type"] == PROBLEMS + "too-many-failed-credentials"


async def test_wrong_admin_bearer_keys_get_429_past_the_budget_without_a_lookup(
    database_url: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    async with running_broker(database_url, tmp_path, gateway=True) as broker:
        gateway = broker.state.gateway
        assert gateway is not None
        gateway.budget = CredentialBudget(burst=BURST, per_second=0.01)
        asked = count_lookups(broker.state.store, monkeypatch)

        answers = [
            await request(
                "GET",
                f"{broker.admin_url}/v1/effects",
                headers={"Authorization": f"Bearer ebk_{n:012x}_{'s' * 43}"},
            )
            for n in range(2 * BURST)
        ]

        assert [a.status for a in answers] == [401] * BURST + [429] * BURST
        assert len(asked) == BURST
        assert int(answers[-1].headers["Retry-After"]) >= 1
        assert answers[-1].problem["type"] == PROBLEMS + "too-many-failed-credentials"
