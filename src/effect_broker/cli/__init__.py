"""The ``effect-broker`` command line: one Typer app, one module per command group."""

from __future__ import annotations

import typer

app = typer.Typer(
    name="effect-broker",
    help="A sidecar HTTP proxy that makes side-effecting tool calls safe to retry.",
    no_args_is_help=True,
    add_completion=False,
)


_registered = False


def _register() -> None:
    """Attach command groups; each lives in its own module under ``effect_broker.cli``.

    Imports are deferred so ``effect-broker --help`` stays fast; calling twice is a no-op.
    """
    global _registered
    if _registered:
        return
    _registered = True
    from effect_broker.cli import (
        bench,
        ca,
        contracts,
        demo,
        doctor,
        effects,
        init,
        keys,
        mcp,
        migrate,
        reconciler,
        routes,
        serve,
        tenants,
        up,
    )

    app.add_typer(routes.routes_app, name="routes")
    app.add_typer(tenants.tenants_app, name="tenants")
    app.add_typer(effects.effects_app, name="effects")
    app.add_typer(demo.demo_app, name="demo")
    app.add_typer(keys.keys_app, name="keys")
    app.add_typer(ca.ca_app, name="ca")
    app.add_typer(contracts.contracts_app, name="contracts")
    app.command(name="migrate")(migrate.migrate)
    app.command(name="serve")(serve.serve)
    app.command(name="init")(init.init)
    app.command(name="up")(up.up)
    app.command(name="reconciler")(reconciler.reconciler)
    app.command(name="doctor")(doctor.doctor)
    app.command(name="bench")(bench.bench)
    app.command(name="mcp")(mcp.mcp)


def main() -> None:
    _register()
    app()
