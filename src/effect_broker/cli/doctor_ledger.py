"""``doctor``'s checks of the ledger: reachable, migrated, on time, keys that open it.

Each check opens the database through the store and closes it again; a check that
raises is reported as a failed finding instead of ending the whole diagnosis.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import aiohttp

from effect_broker.cli.doctor_finding import Finding, guarded
from effect_broker.cli.doctor_keys import KeyFile, KeyFinding, configured_key
from effect_broker.cli.doctor_network import CONNECT_TIMEOUT
from effect_broker.cli.doctor_scope import (
    KeyUsage,
    payload_conflicts,
    stuck_routes,
    suspect_routes,
)
from effect_broker.config.durations import format_duration
from effect_broker.config.settings import Settings
from effect_broker.crypto import Keyring
from effect_broker.errors import EffectBrokerError
from effect_broker.store import Store

MAX_SKEW_SECONDS = 1.0
KEY_SCOPE_WINDOW = timedelta(hours=24)


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


async def database_findings(
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

        async def autovacuum() -> Finding:
            if await store.pending_migrations():
                return Finding(
                    "autovacuum", False, "not checked: migrations pending", warning=True
                )
            tables = await store.tables_without_autovacuum()
            if tables:
                return Finding(
                    "autovacuum",
                    False,
                    f"off for {', '.join(tables)}: their statistics never refresh, so "
                    "as the ledger grows its lookups fall to sequential scans and "
                    "throughput sinks. Turn autovacuum on (or remove the table's "
                    "autovacuum_enabled=false), or run ANALYZE on these tables "
                    "regularly",
                    warning=True,
                )
            return Finding("autovacuum", True, "on for every ledger table")

        findings = [Finding("database", True, "reachable" + source)]
        for check, probe in (
            ("migrations", migrations),
            ("clock skew", skew),
            ("key scope", key_scope),
            ("autovacuum", autovacuum),
        ):
            findings.append(await guarded(check, probe))
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


async def payload_finding(database_url: str, keyring: Keyring | None) -> Finding:
    try:
        store = await Store.connect(database_url, max_size=1)
    except EffectBrokerError as exc:
        return Finding("payload keys", False, exc.message)
    try:
        return await guarded("payload keys", lambda: payload_keys(store, keyring))
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
