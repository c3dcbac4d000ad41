"""``effect-broker up``: the whole thing on a fresh machine, in one command.

An embedded PostgreSQL in the data directory (unless a database URL is given), a master
key generated once and kept there (mode 0600), migrations, with ``--demo`` the packaged
demo payment target, then the proxy and admin ports. Ctrl-C stops all of it.

The routes file is found and validated first: a folder without one, or a broken one,
ends in one line before any key, CA or database cluster is created. ``--demo`` in a
folder without a routes file serves the packaged demo routes. The demo target is never
started implicitly: a sidecar that silently answered on port 9000 could stand in for the
user's own service there.
"""

from __future__ import annotations

import logging
import os
import secrets
import subprocess
import time
from collections.abc import Callable, Iterator
from contextlib import ExitStack, contextmanager
from importlib.resources import as_file
from pathlib import Path
from typing import Annotated

import typer
from pydantic import SecretStr
from rich.console import Console

from effect_broker.cli.addresses import check_free, try_bind
from effect_broker.cli.ca import ensure_ca, trust_lines
from effect_broker.cli.init import STARTER_ROUTES
from effect_broker.cli.local_state import RUNNING_FILE, RunningUp, shown
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
from effect_broker.config.routes_file import load_routes
from effect_broker.config.settings import Settings
from effect_broker.crypto import MasterKey
from effect_broker.demo import payment_target
from effect_broker.embedded import embedded_postgres
from effect_broker.errors import EffectBrokerError
from effect_broker.proxy.tls_ca import CertificateAuthorityError, trust_bundle

console = Console(stderr=True, highlight=False, soft_wrap=True)

DEMO_PORT = 9000
#: How the packaged demo routes name the demo target; ``--demo-port`` rewrites it.
DEMO_ORIGIN = "http://127.0.0.1:9000/"
ROUTES_VARIABLE = "EFFECT_BROKER_ROUTES"
ROUTES_FILE = Path("routes.yaml")
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
def demo_target(data_dir: Path, port: int) -> Iterator[str]:
    """Run the demo payment target until the block ends; yields its URL."""
    process = subprocess.Popen(
        payment_target.command(data_dir / "payment-target.sqlite3", port=port),
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert process.stdout is not None
        line = process.stdout.readline()
        if "listening" not in line:
            raise EffectBrokerError(
                f"the demo payment target did not start (port {port} in use? "
                "choose another with --demo-port)"
            )
        yield f"http://127.0.0.1:{port}"
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
        bool,
        typer.Option(
            help="start the packaged demo payment target; without a routes file, "
            "serve the packaged demo routes too"
        ),
    ] = False,
    demo_port: Annotated[
        int,
        typer.Option(
            min=1, max=65535, help="the demo target's port (the demo routes follow it)"
        ),
    ] = DEMO_PORT,
) -> None:
    """Start everything: embedded PostgreSQL, proxy, admin API (--demo: a demo target)."""
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
    explicit = routes is not None or bool(os.environ.get(ROUTES_VARIABLE))
    packaged = demo and not explicit and not settings.routes.exists()
    if not packaged and not settings.routes.exists():
        console.print(
            f"[red]error:[/] no routes file {shown(settings.routes)}: "
            "`effect-broker init` writes a starter here, "
            "`effect-broker up --demo` runs the packaged demo"
        )
        raise typer.Exit(2)
    try:
        _start(settings, packaged=packaged, demo=demo, demo_port=demo_port)
    except KeyboardInterrupt:
        # Ctrl-C at any stage: everything started so far was stopped on the way out.
        console.print("\ninterrupted: stopped everything that had started")
        raise typer.Exit(130) from None
    console.print("effect-broker stopped")


def _start(settings: Settings, *, packaged: bool, demo: bool, demo_port: int) -> None:
    """Every stage of ``up``, in order; each one stops again when the block unwinds."""
    with ExitStack() as stack:
        try:
            if packaged:
                settings = settings.model_copy(
                    update={"routes": stack.enter_context(as_file(STARTER_ROUTES))}
                )
            load_routes(settings.routes)  # before any key, CA or cluster is made
            check_free(settings)  # and the ports, likewise
            if demo:
                _check_demo_port(demo_port)
            directory = settings.data_dir.resolve()
            directory.mkdir(parents=True, exist_ok=True)
            console.print(f"effect-broker up (data in {directory})")
            if packaged:
                console.print(
                    f"  no {shown(ROUTES_FILE)} here: serving the packaged demo routes "
                    "(`effect-broker init` writes them here to edit)"
                )
                if demo_port != DEMO_PORT:
                    settings = _demo_routes_on(settings, directory, demo_port)
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
            target = None
            if demo:
                with step(f"starting the demo payment target on port {demo_port}"):
                    target = stack.enter_context(demo_target(directory, demo_port))
            banner = _banner(target, directory / "admin.token", trust)
            stack.callback((directory / RUNNING_FILE).unlink, missing_ok=True)

            def ready(proxy_url: str, admin_url: str) -> None:
                served = str(settings.routes.resolve())
                RunningUp(os.getpid(), proxy_url, admin_url, served).write(directory)

            run_on_fastest_loop(
                run_proxy(settings, migrate=True, banner=banner, on_ready=ready)
            )
        except EffectBrokerError as exc:
            console.print(f"[red]error:[/] {exc.message}")
            raise typer.Exit(1) from exc


def _check_demo_port(port: int) -> None:
    try:
        try_bind("127.0.0.1", port)
    except OSError as exc:
        raise EffectBrokerError(
            f"the demo target's port {port} cannot be used ({exc.strerror}); choose "
            "another with --demo-port"
        ) from exc


def _demo_routes_on(settings: Settings, directory: Path, port: int) -> Settings:
    """The packaged demo routes, pointed at a demo target on ``port``, in the data dir."""
    path = directory / "demo-routes.yaml"
    text = settings.routes.read_text("utf-8")
    path.write_text(text.replace(DEMO_ORIGIN, f"http://127.0.0.1:{port}/"), "utf-8")
    return settings.model_copy(update={"routes": path})


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


# Where a client must not use the proxy: the sidecar's own ports.
NO_PROXY = "127.0.0.1,localhost"


def _banner(target: str | None, token_file: Path, trust: list[str]) -> str:
    lines = [
        "",
        "effect-broker is up. Send your agent's HTTP through it:",
        "  export http_proxy={proxy} https_proxy={proxy} HTTP_PROXY={proxy} "
        "HTTPS_PROXY={proxy}",
        f"  export no_proxy={NO_PROXY} NO_PROXY={NO_PROXY}",
        "  (without no_proxy, a request to the sidecar itself, reverse mode or the "
        "admin API, goes through the proxy and is refused: 403 egress-refused)",
        "Admin API: {admin}  (/healthz, /readyz, /metrics, /v1/effects)",
        "Operator console: {admin}/console  (log in with the admin token)",
        "Operators, in this folder (doctor, serve and effects read "
        f"{shown(token_file.parent)}/):",
        "  effect-broker effects list",
        "Elsewhere: export EFFECT_BROKER_ADMIN_URL={admin}"
        + (
            f" EFFECT_BROKER_ADMIN_TOKEN=$(cat {token_file})"
            if token_file.exists()
            else ""
        ),
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
