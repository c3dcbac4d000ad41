"""Everything a proxy request needs, built once at start and shared through an AppKey."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from datetime import timedelta

import aiohttp
from aiohttp import web

from effect_broker.config.routes_config import RoutesConfig
from effect_broker.crypto import Keyring
from effect_broker.engine.dispatch import Dispatcher
from effect_broker.metrics import Metrics
from effect_broker.proxy.receipt_cache import ReceiptCache
from effect_broker.proxy.tenancy import TenantResolver
from effect_broker.store import Store


@dataclass(frozen=True, slots=True)
class ProxyState:
    config: RoutesConfig
    store: Store
    keyring: Keyring
    session: aiohttp.ClientSession
    dispatcher: Dispatcher
    tenant: str  # the sidecar's tenant; unused in gateway mode
    gateway: TenantResolver | None  # set in gateway mode: tenant per request
    owner: str
    injected: Mapping[str, Mapping[str, str]]  # route name -> resolved header values
    max_request_bytes: int
    max_receipt_bytes: int
    metrics: Metrics
    lease_grace: timedelta
    receipts: ReceiptCache


PROXY_STATE = web.AppKey("proxy_state", ProxyState)
