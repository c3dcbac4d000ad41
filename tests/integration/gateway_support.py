"""Gateway mode's credentials: tenant API keys and the Basic header that carries them."""

from __future__ import annotations

import base64

from effect_broker.store import Store
from effect_broker.tenancy import new_api_key


async def make_key(store: Store, tenant: str) -> str:
    key = new_api_key()
    await store.add_api_key(tenant, key.key_id, key.secret_hash)
    return key.api_key


def basic(user: str, password: str) -> str:
    return "Basic " + base64.b64encode(f"{user}:{password}".encode()).decode()
