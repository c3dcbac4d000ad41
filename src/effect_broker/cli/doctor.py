"""``effect-broker doctor``: everything a proxy needs, checked before it serves.

Each check says what it found and what to do about it; the command exits 1 when any
check fails, so it works as a deployment gate.
"""

from __future__ import annotations

import asyncio
import os
import ssl
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Annotated
from urllib.parse import urlsplit

import aiohttp
import typer
from rich.console import Console
from rich.table import Table

from effect_broker.cli.ca import ca_paths
from effect_broker.cli.doctor_keys import (
    KeyFile,
    KeyFinding,
    configured_key,
    ledger_key,
)
from effect_broker.cli.doctor_scope import (
    KeyUsage,
    payload_conflicts,
    stuck_routes,
    suspect_routes,
)
from effect_broker.cli.local_state import RunningUp, up_database, using
from effect_broker.cli.options import DatabaseUrl, Routes, settings_from
from effect_broker.cli.words import plural
from effect_broker.config.durations import format_duration
from effect_broker.config.routes_config import RoutesConfig
from effect_broker.config.routes_file import load_routes, resolve_inject_headers
from effect_broker.config.settings import Settings
from effect_broker.crypto import Keyring
from effect_broker.engine.upstream import tls_failure
from effect_broker.errors import EffectBrokerError
from effect_broker.proxy.tls_ca import fingerprint
from effect_broker.runtime import load_ca, upstream_tls_from
from effect_broker.store import Store

console = Console(soft_wrap=True, highlight=False, emoji=False)  # no :AB: emoji

MAX_SKEW_SECONDS = 1.0
KEY_SCOPE_WINDOW = timedelta(hours=24)
CONNECT_TIMEOUT = 3.0
CA_WARN_BEFORE = timedelta(days=30)


@dataclass(frozen=True, slots=True)
class Finding:
    check: str
    ok: bool
    detail: str
    warning: bool = False


async def _guard(check: str, probe: Callable[[], Awaitable[Finding]]) -> Finding:
    try:
        return await probe()
    except EffectBrokerError as exc:
        return Finding(check, False, exc.message)


async def _ask(url: str, tls: ssl.SSLContext) -> str:
    """HEAD the upstream as the proxy would reach it (same trust, no proxy variables,
    certificates always verified); what it answered, or ``UpstreamProblem``."""
    timeout = aiohttp.ClientTimeout(total=CONNECT_TIMEOUT * 2, connect=CONNECT_TIMEOUT)
    async with (
        aiohttp.ClientSession(
            connector=aiohttp.TCPConnector(ssl=tls, limit=1),
            trust_env=False,
            timeout=timeout,
        ) as session,
        session.head(url, allow_redirects=False) as response,
    ):
        return f"HEAD answered {response.status}"


def _origin(upstream: str) -> tuple[str, str, int]:
    parts = urlsplit(upstream)
    default = 443 if parts.scheme == "https" else 80
    return parts.scheme, parts.hostname or "", parts.port or default


async def _upstreams(config: RoutesConfig, tls: ssl.SSLContext | None) -> list[Finding]:
    """Each upstream as the proxy would reach it: connect, TLS handshake with the
    proxy's own trust (the system store plus EFFECT_BROKER_UPSTREAM_CA_FILE), HEAD.

    A certificate the proxy does not trust fails: every recorded request of those
    routes would end in 502 upstream-tls. An upstream that does not answer now is a
    warning: the target may simply be down.
    """
    by_origin: dict[tuple[str, str, int], tuple[str, list[str]]] = {}
    for route in config.routes:
        if route.upstream:
            url, names = by_origin.setdefault(
                _origin(route.upstream), (route.upstream, [])
            )
            names.append(route.name)
    findings = []
    for (scheme, host, port), (url, names) in sorted(by_origin.items()):
        check = f"upstream {host}:{port}"
        used_by = f" (routes {', '.join(names)})"
        if tls is None:
            findings.append(Finding(check, False, "not checked: no upstream trust store"))
            continue
        try:
            answer = await _ask(url, tls)
        except aiohttp.ClientConnectorCertificateError as exc:
            findings.append(
                Finding(
                    check,
                    False,
                    f"{tls_failure(host, exc)}: every request of these routes would "
                    "end in 502 upstream-tls and nothing would be sent. Trust the "
                    "target's CA with EFFECT_BROKER_UPSTREAM_CA_FILE (a PEM bundle), "
                    "or fix its certificate" + used_by,
                )
            )
            continue
        except aiohttp.ClientConnectorSSLError as exc:
            findings.append(Finding(check, False, f"{tls_failure(host, exc)}{used_by}"))
            continue
        except (aiohttp.ClientError, OSError, TimeoutError) as exc:
            why = str(exc) or type(exc).__name__
            findings.append(
                Finding(check, False, f"cannot reach it now: {why}{used_by}", True)
            )
            continue
        verified = "TLS verified, " if scheme == "https" else ""
        findings.append(Finding(check, True, f"{verified}{answer}{used_by}"))
    return findings


async def diagnose(settings: Settings) -> list[Finding]:
    findings: list[Finding] = []
    try:
        config = load_routes(settings.routes)
        findings.append(
            Finding(
                "routes",
                True,
                f"{settings.routes}: {plural(len(config.routes), 'route')}",
            )
        )
    except EffectBrokerError as exc:
        findings.append(Finding("routes", False, exc.message))
        config = None
    if config is not None:
        try:
            resolve_inject_headers(config, os.environ)
            findings.append(Finding("secrets", True, "every ${env:...} reference is set"))
        except EffectBrokerError as exc:
            # The routes themselves are fine: their upstreams are still checked below.
            findings.append(Finding("secrets", False, exc.message))
    database_url, source = settings.database_url, ""
    if not database_url and (embedded := up_database(settings.data_dir)):
        database_url = embedded
        source = f" (`effect-broker up`'s embedded PostgreSQL in {settings.data_dir})"
    ledger_keys: list[str] | None = None
    if not database_url:
        database = [
            Finding("database", False, "set EFFECT_BROKER_DATABASE_URL or --database-url")
        ]
    else:
        database, ledger_keys = await _database(
            database_url, source, settings.admin_listen
        )
    key_file = KeyFile.find(settings.data_dir)
    master, keyring = configured_keys(settings, key_file, ledger_keys)
    findings.append(Finding("master key", master.ok, master.detail))
    findings += database
    if ledger_keys is not None:
        ledger = ledger_key(keyring, key_file, ledger_keys)
        findings.append(Finding("ledger key", ledger.ok, ledger.detail))
        assert database_url is not None
        findings.append(await _payloads(database_url, keyring))
    findings += tls_findings(with_ups_ca(settings))
    if config is not None:
        try:
            tls: ssl.SSLContext | None = upstream_tls_from(settings)
        except EffectBrokerError:
            tls = None  # reported by the "upstream TLS" check
        findings += await _upstreams(config, tls)
    return findings


def ups_routes(settings: Settings) -> Path | None:
    """The routes file a running ``up`` in the data directory serves (the packaged
    demo's included), for a doctor started beside it in a folder without one."""
    running = RunningUp.find(settings.data_dir)
    if running is None or running.routes is None or not Path(running.routes).exists():
        return None
    return Path(running.routes)


def with_ups_ca(settings: Settings) -> Settings:
    """The CA ``up`` intercepts with, when none is configured and up made one: doctor
    next to a running up must not report "no CA" while up intercepts with its own."""
    if settings.ca_cert is not None or settings.ca_key is not None:
        return settings
    cert, key = ca_paths(settings.data_dir)
    if not (cert.exists() and key.exists()):
        return settings
    return settings.model_copy(update={"ca_cert": cert, "ca_key": key})


def tls_findings(settings: Settings) -> list[Finding]:
    """The interception CA (usable, and for how long) and the upstream trust store."""
    findings: list[Finding] = []
    try:
        ca = load_ca(settings)
    except EffectBrokerError as exc:
        findings.append(Finding("CA", False, exc.message))
    else:
        if ca is None:
            findings.append(
                Finding(
                    "CA",
                    True,
                    "none configured, and no CA of `effect-broker up` in "
                    f"{settings.data_dir}: CONNECT to watched hosts is refused",
                )
            )
        else:
            until = ca.certificate.not_valid_after_utc
            left = until - datetime.now(UTC)
            findings.append(
                Finding(
                    "CA",
                    left > timedelta(0),
                    f"{settings.ca_cert}: CONNECT to watched hosts is intercepted; "
                    f"{fingerprint(ca.certificate)[:23]}... valid until "
                    f"{until:%Y-%m-%d}"
                    + ("" if left > CA_WARN_BEFORE else "; rotate: ca init --force"),
                    warning=timedelta(0) < left <= CA_WARN_BEFORE,
                )
            )
    try:
        upstream_tls_from(settings)
        extra = settings.upstream_ca_file
        detail = "system trust store" + (f" plus {extra}" if extra else "")
        findings.append(Finding("upstream TLS", True, detail))
    except EffectBrokerError as exc:
        findings.append(Finding("upstream TLS", False, exc.message))
    return findings


async def _proxy_metrics(admin_listen: str) -> str | None:
    """A running proxy's ``/metrics`` page (open, no tenant data), or None."""
    try:
        async with (
            aiohttp.ClientSession(
                timeout=aiohttp.ClientTimeout(total=CONNECT_TIMEOUT)
            ) as session,
            session.get(f"http://{admin_listen}/metrics") as answer,
        ):
            return await answer.text() if answer.status == 200 else None
    except (aiohttp.ClientError, TimeoutError, ValueError):
        return None


async def _database(
    database_url: str, source: str, admin_listen: str
) -> tuple[list[Finding], list[str] | None]:
    """The database findings, and the ledger's master key ids when they could be read."""
    try:
        store = await Store.connect(database_url, max_size=1)
    except EffectBrokerError as exc:
        return [Finding("database", False, exc.message)], None
    try:

        async def migrations() -> Finding:
            pending = await store.pending_migrations()
            if pending:
                labels = ", ".join(m.label for m in pending)
                return Finding("migrations", False, f"pending: {labels}; run migrate")
            return Finding("migrations", True, "current")

        async def skew() -> Finding:
            before = datetime.now(UTC)
            database_now = await store.clock()
            after = datetime.now(UTC)
            offset = (database_now - (before + (after - before) / 2)).total_seconds()
            ok = abs(offset) <= MAX_SKEW_SECONDS
            return Finding(
                "clock skew",
                ok,
                f"{offset:+.3f}s against the database"
                + ("" if ok else "; leases and deadlines need synchronized clocks (NTP)"),
            )

        async def key_scope() -> Finding:
            if await store.pending_migrations():
                return Finding(
                    "key scope", False, "not checked: migrations pending", warning=True
                )
            usage = [
                KeyUsage(route, effects, requests)
                for route, effects, requests in await store.operation_key_usage(
                    KEY_SCOPE_WINDOW
                )
            ]
            notes = suspect_routes(usage, KEY_SCOPE_WINDOW)
            metrics = await _proxy_metrics(admin_listen)
            if metrics is not None:
                notes += stuck_routes(payload_conflicts(metrics), usage)
            if notes:
                return Finding(
                    "key scope", False, "; ".join(n.detail for n in notes), warning=True
                )
            stuck = (
                "none looks stuck in place"
                if metrics is not None
                else f"stuck keys not checked: no proxy metrics at {admin_listen}"
            )
            return Finding(
                "key scope",
                True,
                f"no route's keys look minted per call (last "
                f"{format_duration(KEY_SCOPE_WINDOW)}); {stuck}",
            )

        findings = [Finding("database", True, "reachable" + source)]
        for check, probe in (
            ("migrations", migrations),
            ("clock skew", skew),
            ("key scope", key_scope),
        ):
            findings.append(await _guard(check, probe))
        try:
            ledger_keys: list[str] | None = await store.master_key_ids()
        except EffectBrokerError as exc:
            findings.append(Finding("ledger key", False, exc.message))
            ledger_keys = None
        return findings, ledger_keys
    finally:
        await store.close()


def configured_keys(
    settings: Settings, key_file: KeyFile | None, ledger_keys: list[str] | None
) -> tuple[KeyFinding, Keyring | None]:
    """``EFFECT_BROKER_MASTER_KEYS`` (during a rotation) or the one-key form."""
    if settings.master_keys is None:
        value = settings.master_key.get_secret_value() if settings.master_key else None
        return configured_key(value, key_file, ledger_keys)
    try:
        keyring = Keyring(settings.master_key_list())
    except EffectBrokerError as exc:
        return KeyFinding(False, exc.message), None
    return KeyFinding(True, f"key ids {', '.join(keyring.key_ids)}"), keyring


async def _payloads(database_url: str, keyring: Keyring | None) -> Finding:
    try:
        store = await Store.connect(database_url, max_size=1)
    except EffectBrokerError as exc:
        return Finding("payload keys", False, exc.message)
    try:
        return await _guard("payload keys", lambda: payload_keys(store, keyring))
    finally:
        await store.close()


async def payload_keys(store: Store, keyring: Keyring | None) -> Finding:
    """Name the stored payloads that no configured master key can open.

    Such payloads are lost while their key is missing: a replay of those receipts or a
    resend of those requests fails. Typically a key dropped before ``keys rotate`` ran.
    """
    usage = await store.key_usage()
    configured = set(keyring.key_ids) if keyring else set()
    missing = [use for use in usage if use.key_id not in configured]
    if not missing:
        return Finding("payload keys", True, "every stored payload opens with these keys")
    lost = "; ".join(
        f"key {use.key_id} seals {use.payloads} {use.kind} payload(s)"
        + (f", e.g. effect {use.example}" if use.example else "")
        for use in missing
    )
    return Finding(
        "payload keys",
        False,
        f"unreadable without a missing key: {lost}. Add the key to "
        "EFFECT_BROKER_MASTER_KEYS (after the new one) and run "
        "`effect-broker keys rotate`",
    )


def doctor(
    routes: Routes = None,
    database_url: DatabaseUrl = None,
    data_dir: Annotated[
        Path | None,
        typer.Option(
            help="where `effect-broker up` keeps its key and database "
            "[default: ./.effect-broker]",
            show_default=False,
        ),
    ] = None,
) -> None:
    """Check routes, secrets, master key, database, migrations, clock, CA, upstreams."""
    settings = settings_from(routes=routes, database_url=database_url, data_dir=data_dir)
    used: list[Path] = []
    asked = routes is not None or bool(os.environ.get("EFFECT_BROKER_ROUTES"))
    if not asked and not settings.routes.exists() and (served := ups_routes(settings)):
        settings = settings.model_copy(update={"routes": served})
        used.append(served)
    no_key = settings.master_key is None and settings.master_keys is None
    if no_key and (key_file := KeyFile.find(settings.data_dir)) is not None:
        used.append(key_file.path)
    if settings.database_url is None and up_database(settings.data_dir) is not None:
        used.append(settings.data_dir / "postgres")
    if (up_ca := with_ups_ca(settings)) is not settings and up_ca.ca_cert is not None:
        used.append(up_ca.ca_cert)
    if used:
        console.print(using(used), highlight=False)
    findings = asyncio.run(diagnose(settings))
    table = Table("check", "result", "detail", title="effect-broker doctor")
    for finding in findings:
        if finding.ok:
            result = "[green]ok[/]"
        elif finding.warning:
            result = "[yellow]warning[/]"
        else:
            result = "[bold red]FAIL[/]"
        table.add_row(finding.check, result, finding.detail)
    console.print(table)
    failed = [f for f in findings if not f.ok and not f.warning]
    if failed:
        console.print(f"[bold red]{len(failed)} check(s) failed[/]")
        raise typer.Exit(1)
