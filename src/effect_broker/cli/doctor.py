"""``effect-broker doctor``: everything a proxy needs, checked before it serves.

Each check says what it found and what to do about it; the command exits 1 when any
check fails, so it works as a deployment gate.
"""

from __future__ import annotations

import asyncio
import os
import ssl
from pathlib import Path
from typing import Annotated

import typer
from rich.console import Console
from rich.table import Table

from effect_broker.cli.doctor_finding import Finding
from effect_broker.cli.doctor_keys import (
    KeyFile,
    ledger_key,
)
from effect_broker.cli.doctor_ledger import (
    configured_keys,
    database_findings,
    payload_finding,
)
from effect_broker.cli.doctor_network import tls_findings, upstream_findings, with_ups_ca
from effect_broker.cli.local_state import RunningUp, up_database, using
from effect_broker.cli.options import DatabaseUrl, Routes, settings_from
from effect_broker.cli.words import plural
from effect_broker.config.routes_file import load_routes, resolve_inject_headers
from effect_broker.config.settings import Settings
from effect_broker.errors import EffectBrokerError
from effect_broker.runtime import upstream_tls_from


def _console() -> Console:
    """A console made when the command runs, so its table fits the terminal (or
    ``COLUMNS``) of that run; one made at import kept the width of whatever imported
    the module first (another command, in a process that runs several)."""
    return Console(soft_wrap=True, highlight=False, emoji=False)  # no :AB: emoji


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
        database, ledger_keys = await database_findings(
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
        findings.append(await payload_finding(database_url, keyring))
    findings += tls_findings(with_ups_ca(settings))
    if config is not None:
        try:
            tls: ssl.SSLContext | None = upstream_tls_from(settings)
        except EffectBrokerError:
            tls = None  # reported by the "upstream TLS" check
        findings += await upstream_findings(config, tls)
    return findings


def ups_routes(settings: Settings) -> Path | None:
    """The routes file a running ``up`` in the data directory serves (the packaged
    demo's included), for a doctor started beside it in a folder without one."""
    running = RunningUp.find(settings.data_dir)
    if running is None or running.routes is None or not Path(running.routes).exists():
        return None
    return Path(running.routes)


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
    console = _console()
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
