"""``effect-broker up``: the whole thing on a fresh machine, in one command.

An embedded PostgreSQL in the data directory (unless a database URL is given), a master
key generated once and kept there (mode 0600), migrations, the demo payment target from
``examples/``, then the proxy and admin ports. Ctrl-C stops all of it.
"""

from __future__ import annotations

import logging
import os
import secrets
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from contextlib import ExitStack, contextmanager
from pathlib import Path
from typing import Annotated

import typer
from pydantic import SecretStr
from rich.console import Console

from effect_broker.cli.ca import ensure_ca, trust_lines
from effect_broker.cli.options import (
    AdminListen,
    DatabaseUrl,
    Gateway,
    Listen,
    Routes,
    Tenant,
    settings_from,
)
from effect_broker.cli.serve import announce_failpoints, run_on_fastest_loop, run_proxy
from effect_broker.config.settings import Settings
from effect_broker.crypto import MasterKey
from effect_broker.embedded import embedded_postgres
from effect_broker.errors import EffectBrokerError
from effect_broker.proxy.tls_ca import CertificateAuthorityError, trust_bundle

console = Console(stderr=True, highlight=False, soft_wrap=True)

DEMO_PORT = 9000
TRY_IT = (
    "curl -x {proxy} -H 'Operation-Key: order-42:charge' "
    "-H 'Content-Type: application/json' "
    '-d \'{{"amount": 1000, "currency": "usd", "order_id": "order-42"}}\' '
    "http://payments.internal/v1/charges"
)


def load_or_create_secret(path: Path, make: Callable[[], str]) -> tuple[str, bool]:
    """A secret kept in the data directory; created once, readable by its owner only."""
    if path.exists():
        return path.read_text().strip(), False
    secret = make()
    descriptor = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(descriptor, "w") as handle:
        handle.write(secret + "\n")
    return secret, True


@contextmanager
def step(message: str) -> Iterator[None]:
    console.print(f"  {message} ...", end="")
    started = time.monotonic()
    yield
    console.print(f" done ({time.monotonic() - started:.1f}s)")


@contextmanager
def demo_target(script: Path, data_dir: Path) -> Iterator[str]:
    """Run the demo payment target until the block ends; yields its URL."""
    process = subprocess.Popen(
        [
            sys.executable,
            str(script),
            "--port",
            str(DEMO_PORT),
            "--db",
            str(data_dir / "payment-target.sqlite3"),
        ],
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert process.stdout is not None
        line = process.stdout.readline()
        if "listening" not in line:
            raise EffectBrokerError(
                f"the demo payment target did not start (port {DEMO_PORT} in use?)"
            )
        yield f"http://127.0.0.1:{DEMO_PORT}"
    finally:
        process.terminate()
        try:
            process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            process.kill()


def up(
    routes: Routes = None,
    database_url: DatabaseUrl = None,
    listen: Listen = None,
    admin_listen: AdminListen = None,
    tenant: Tenant = None,
    gateway: Gateway = None,
    data_dir: Annotated[
        Path | None,
        typer.Option(help="where the database and key live [default: ./.effect-broker]"),
    ] = None,
    demo: Annotated[
        bool, typer.Option(help="start the demo payment target from examples/")
    ] = True,
) -> None:
    """Start everything: embedded PostgreSQL, demo target, proxy and admin API."""
    logging.basicConfig(level=logging.WARNING, format="%(asctime)s %(name)s %(message)s")
    announce_failpoints()
    settings = settings_from(
        routes=routes,
        database_url=database_url,
        listen=listen,
        admin_listen=admin_listen,
        tenant=tenant,
        gateway=gateway,
        data_dir=data_dir,
    )
    directory = settings.data_dir.resolve()
    directory.mkdir(parents=True, exist_ok=True)
    console.print(f"effect-broker up (data in {directory})")
    with ExitStack() as stack:
        try:
            for field, name, make in (
                ("master_key", "master.key", lambda: MasterKey.generate().to_base64()),
                ("admin_token", "admin.token", lambda: secrets.token_urlsafe(24)),
            ):
                if getattr(settings, field) is None:
                    value, created = load_or_create_secret(directory / name, make)
                    console.print(
                        f"  {name} {'created in' if created else 'read from'} {directory}"
                    )
                    settings = settings.model_copy(update={field: SecretStr(value)})
            trust: list[str] = []
            if settings.ca_cert is None and settings.ca_key is None:
                settings, trust = _with_ca(settings, directory)
            if settings.database_url is None:
                with step("starting embedded PostgreSQL"):
                    dsn = stack.enter_context(embedded_postgres(directory / "postgres"))
                settings = settings.model_copy(update={"database_url": dsn})
            script = settings.routes.resolve().parent / "examples" / "payment_target.py"
            target = None
            if demo and script.exists():
                with step(f"starting the demo payment target on port {DEMO_PORT}"):
                    target = stack.enter_context(demo_target(script, directory))
            banner = _banner(target, directory / "admin.token", trust)
            run_on_fastest_loop(run_proxy(settings, migrate=True, banner=banner))
        except EffectBrokerError as exc:
            console.print(f"[red]error:[/] {exc.message}")
            raise typer.Exit(1) from exc
    console.print("effect-broker stopped")


def _with_ca(settings: Settings, directory: Path) -> tuple[Settings, list[str]]:
    """The data directory's CA (made on first start), and how clients trust it."""
    try:
        cert, key, created = ensure_ca(directory)
        bundle = directory / "ca-bundle.pem"
        bundle.write_bytes(trust_bundle(cert.read_bytes()))
    except CertificateAuthorityError as exc:
        raise EffectBrokerError(str(exc)) from exc
    console.print(f"  ca.pem {'created in' if created else 'read from'} {directory}")
    settings = settings.model_copy(update={"ca_cert": cert, "ca_key": key})
    return settings, trust_lines(cert, bundle)


def _banner(target: str | None, token_file: Path, trust: list[str]) -> str:
    lines = [
        "",
        "effect-broker is up. Send your agent's HTTP through it:",
        "  export HTTP_PROXY={proxy} HTTPS_PROXY={proxy}",
        "Admin API: {admin}  (/healthz, /readyz, /metrics, /v1/effects)",
        "Operators: export EFFECT_BROKER_ADMIN_URL={admin}"
        + (
            f" EFFECT_BROKER_ADMIN_TOKEN=$(cat {token_file})"
            if token_file.exists()
            else ""
        ),
        "  effect-broker effects list",
    ]
    if trust:
        lines += [
            "HTTPS to hosts routes watch is intercepted; trust the local CA in the "
            "agent's container only:",
            *(f"  {line}" for line in trust),
        ]
    if target is not None:
        lines += [
            f"Demo payment target: {target}  (its charges: curl {target}/charges)",
            "Try it, as often as you like; the target charges once:",
            "  " + TRY_IT,
        ]
    lines += ["Ctrl-C stops everything."]
    return "\n".join(lines)
