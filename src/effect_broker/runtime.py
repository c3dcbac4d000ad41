"""Open everything a proxy or reconciler process needs, and close it in reverse order.

Start-up refuses to run on a ledger it cannot serve correctly: pending migrations, master
keys none of which the ledger was written with, or an ``${env:...}`` secret
that is not set. Each is a clear error before the first request, never a surprise later.
"""

from __future__ import annotations

import asyncio
import os
import socket
import ssl
from collections.abc import AsyncIterator, Mapping
from contextlib import asynccontextmanager

from effect_broker.answers import ReceiptCache
from effect_broker.config.egress import EgressPolicy, default_rules
from effect_broker.config.routes_config import RoutesConfig
from effect_broker.config.routes_file import resolve_inject_headers
from effect_broker.config.settings import Settings
from effect_broker.crypto import Keyring
from effect_broker.engine import (
    Engine,
    UpstreamSlots,
    Waiters,
    Wiring,
    client_session,
    upstream_tls,
    with_idempotency_root,
    worker_name,
)
from effect_broker.errors import MigrationError, TLSSetupError
from effect_broker.mcp.answers import McpProtocol
from effect_broker.mcp.handler import McpEndpoint
from effect_broker.metrics import Metrics
from effect_broker.proxy.egress import EgressGuard
from effect_broker.proxy.host_check import HostCheck
from effect_broker.proxy.state import ProxyState
from effect_broker.proxy.tls_ca import CertificateAuthority, CertificateAuthorityError
from effect_broker.store import Store
from effect_broker.store.dsn import ledger_endpoints
from effect_broker.tenancy import TenantResolver
from effect_broker.tracing import configure as configure_tracing


@asynccontextmanager
async def open_runtime(
    settings: Settings,
    config: RoutesConfig,
    *,
    environ: Mapping[str, str] | None = None,
    migrate: bool = False,
    role: str = "proxy",
) -> AsyncIterator[ProxyState]:
    keyring = Keyring(settings.master_key_list())
    injected = resolve_inject_headers(config, os.environ if environ is None else environ)
    configure_tracing()
    ca = load_ca(settings)
    tls = upstream_tls_from(settings)
    if not settings.database_url:
        raise MigrationError(
            "no database: set EFFECT_BROKER_DATABASE_URL or --database-url "
            "(`effect-broker up` starts an embedded PostgreSQL by itself)"
        )
    store = await Store.connect(
        settings.database_url,
        min_size=settings.pool_min_size,
        max_size=settings.pool_max_size,
    )
    waiters = Waiters(store.effect_versions)
    try:
        if migrate:
            await store.migrate()
        pending = await store.pending_migrations()
        if pending:
            raise MigrationError(
                f"the ledger lacks migrations {', '.join(m.label for m in pending)}; "
                "run `effect-broker migrate` first"
            )
        await store.check_master_keys(keyring.key_ids)
        keyring = await with_idempotency_root(store, keyring)
        metrics = Metrics()
        store.on_fenced = metrics.fenced.inc
        # Effects and pass-through get separate clients: a slow pass-through target
        # cannot hold the connections effects need. Effects are bounded per route by
        # their slots, so their client has no pool limit of its own.
        ledger = await ledger_authorities(settings.database_url)
        egress = EgressGuard(egress_policy(settings, config, ledger=ledger))
        async with (
            client_session(limit=0, tls=tls) as effect_session,
            egress.session(limit=settings.passthrough_connections, tls=tls) as session,
        ):
            wiring = Wiring(
                config=config,
                store=store,
                keyring=keyring,
                session=effect_session,
                injected=injected,
                max_receipt_bytes=settings.max_receipt_bytes,
                metrics=metrics,
                lease_grace=settings.lease_grace,
                slots=UpstreamSlots(
                    per_route=settings.upstream_connections,
                    queue_timeout=settings.upstream_queue_timeout,
                ),
                reconciler_slots=UpstreamSlots(
                    per_route=settings.reconciler_connections,
                    queue_timeout=settings.upstream_queue_timeout,
                ),
                waiters=waiters,
                protocols={
                    route.name: McpProtocol()
                    for route in config.routes
                    if route.mcp is not None
                },
            )
            engine = Engine(wiring, owner=worker_name(role))
            receipts = ReceiptCache(settings.receipt_cache_bytes)
            mcp = McpEndpoint(
                engine,
                running_calls=store,
                receipts=receipts,
                max_request_bytes=settings.max_request_bytes,
            )
            yield ProxyState(
                config=config,
                store=store,
                keyring=keyring,
                session=session,
                egress=egress,
                engine=engine,
                tenant=settings.tenant,
                gateway=TenantResolver(store) if settings.gateway else None,
                max_request_bytes=settings.max_request_bytes,
                metrics=metrics,
                receipts=receipts,
                ca=ca,
                mcp=mcp,
                on_shutdown=(mcp.streams.end,),
                injected=injected,
                host_check=HostCheck.configured(
                    listen=settings.listen,
                    allowed=settings.allowed_hosts,
                    hostname=socket.gethostname(),
                ),
            )
    finally:
        await waiters.close()
        await store.close()


def egress_policy(
    settings: Settings, config: RoutesConfig, *, ledger: list[str]
) -> EgressPolicy:
    """routes.yaml's deny and allow lists over the refusals this process needs: its own
    configured ports (bound ports are added once known), its ledger (``ledger``, as
    ``ledger_authorities`` finds it), and its mode."""
    return EgressPolicy.from_lists(
        config.proxy.deny,
        config.proxy.allow,
        default_rules(
            listen=[settings.listen],
            admin=[settings.admin_listen],
            ledger=ledger,
            gateway=settings.gateway,
        ),
    )


async def ledger_authorities(dsn: str | None) -> list[str]:
    """host:port of every TCP endpoint of the ledger, and of each address a name among
    them resolves to now: a tunnel to another name for the same server (or to its IP)
    is refused too. A name that does not resolve keeps only its own rule."""
    found: list[str] = []
    loop = asyncio.get_running_loop()
    for host, port in ledger_endpoints(dsn):
        found.append(authority(host, port))
        try:
            answers = await loop.getaddrinfo(host, port, type=socket.SOCK_STREAM)
        except (OSError, UnicodeError):
            continue
        found += [authority(str(answer[4][0]), port) for answer in answers]
    return list(dict.fromkeys(found))


def authority(host: str, port: int) -> str:
    """``host:port``, an IPv6 literal in brackets."""
    return f"[{host}]:{port}" if ":" in host else f"{host}:{port}"


def load_ca(settings: Settings) -> CertificateAuthority | None:
    """The CA that intercepts CONNECT to guarded hosts: both files, or neither."""
    if settings.ca_cert is None and settings.ca_key is None:
        return None
    if settings.ca_cert is None or settings.ca_key is None:
        raise TLSSetupError(
            "set both --ca-cert and --ca-key (EFFECT_BROKER_CA_CERT, "
            "EFFECT_BROKER_CA_KEY), or neither"
        )
    try:
        return CertificateAuthority.load(settings.ca_cert, settings.ca_key)
    except CertificateAuthorityError as exc:
        raise TLSSetupError(str(exc)) from exc


def upstream_tls_from(settings: Settings) -> ssl.SSLContext:
    try:
        return upstream_tls(settings.upstream_ca_file)
    except (OSError, ssl.SSLError) as exc:
        raise TLSSetupError(
            f"cannot load EFFECT_BROKER_UPSTREAM_CA_FILE {settings.upstream_ca_file}: "
            f"{exc}"
        ) from exc
