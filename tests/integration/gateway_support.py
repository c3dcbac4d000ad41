"""Gateway mode's credentials: tenant API keys and the Basic header that carries them."""

from __future__ import annotations

import base64
import json

import aiohttp

from effect_broker.store import Store
from effect_broker.tenancy import new_api_key


async def make_key(store: Store, tenant: str) -> str:
    key = new_api_key()
    await store.add_api_key(tenant, key.key_id, key.secret_hash)
    return key.api_key


def basic(user: str, password: str) -> str:
    return "Basic " + base64.b64encode(f"{user}:{password}".encode()).decode()


CHARGE = json.dumps({"amount": 700, "currency": "usd", "order_id": "order-7"}).encode()


async def charge(proxy: str, auth: str | None) -> aiohttp.ClientResponse:
    async with (
        aiohttp.ClientSession() as session,
        session.post(
            "http://payments.internal/v1/charges",
            data=CHARGE,
            headers={
                "Operation-Key": "order-7:charge",
                "Content-Type": "application/json",
                # aiohttp sends proxy_headers only on CONNECT; plain http needs this.
                **({"Proxy-Authorization": auth} if auth else {}),
            },
            proxy=proxy,
        ) as response,
    ):
        await response.read()
        return response
