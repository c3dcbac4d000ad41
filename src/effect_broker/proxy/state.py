"""Everything a proxy request needs, built once at start and shared through an AppKey."""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field

import aiohttp
from aiohttp import web

from effect_broker.answers import ReceiptCache
from effect_broker.config.contracts import Route
from effect_broker.config.paths import RequestPath
from effect_broker.config.routes_config import RoutesConfig
from effect_broker.crypto import Keyring
from effect_broker.engine import Engine, LedgerReader
from effect_broker.metrics import Metrics
from effect_broker.proxy.egress import EgressGuard
from effect_broker.proxy.host_check import HostCheck
from effect_broker.proxy.tls_ca import CertificateAuthority
from effect_broker.tenancy import TenantResolver

# Serves an MCP route's requests (request, route, tenant, normalised path); supplied by
# the runtime, so the proxy and the MCP adapter stay independent of each other.
McpHandler = Callable[
    [web.Request, Route, str, RequestPath], Awaitable[web.StreamResponse]
]


@dataclass(frozen=True, slots=True)
class ProxyState:
    config: RoutesConfig
    store: LedgerReader  # reads only (admin views, readiness); writes: the engine
    keyring: Keyring
    session: aiohttp.ClientSession  # pass-through only; effects use the engine's
    egress: (
        EgressGuard  # where pass-through and tunnels may go; its resolver is session's
    )
    engine: Engine
    tenant: str  # the sidecar's tenant; unused in gateway mode
    gateway: TenantResolver | None  # set in gateway mode: tenant per request
    max_request_bytes: int
    metrics: Metrics
    receipts: ReceiptCache
    ca: CertificateAuthority | None = None  # set: CONNECT to guarded hosts intercepted
    mcp: McpHandler | None = None  # set when routes.yaml has MCP routes
    # Each route's resolved inject_headers, by route name: what pass-through under a
    # reverse route's prefix carries to that route's upstream.
    injected: Mapping[str, Mapping[str, str]] = field(default_factory=dict)
    # The names a request addressed to the proxy itself may carry in Host; None: any.
    host_check: HostCheck | None = None
    # Run when the process stops, before requests in flight are given the drain
    # deadline: what would otherwise hold it (an MCP route's open GET streams).
    on_shutdown: tuple[Callable[[], Awaitable[None]], ...] = ()


PROXY_STATE = web.AppKey("proxy_state", ProxyState)
