"""The ``effect-broker`` command line: one Typer app, one module per command group.

Importing every command module costs seconds (the MCP SDK, the crash matrix, the
database driver), so ``main`` imports only the module of the command asked for. The
top-level help (``-h``, ``--help``, no arguments) and ``--version`` import none: the
help lists each command with the summary kept in ``SUMMARIES``, which a test holds equal
to the commands' own help.
"""

from __future__ import annotations

import sys
from importlib import import_module
from importlib.metadata import PackageNotFoundError, version
from typing import Annotated

import typer

HELP = "A sidecar HTTP proxy that makes side-effecting tool calls safe to retry."

app = typer.Typer(
    name="effect-broker",
    help=HELP,
    no_args_is_help=True,
    add_completion=False,
    context_settings={"help_option_names": ["-h", "--help"]},
)

# name -> (module under effect_broker.cli, attribute, a group of commands?)
COMMANDS: dict[str, tuple[str, str, bool]] = {
    "routes": ("routes", "routes_app", True),
    "tenants": ("tenants", "tenants_app", True),
    "effects": ("effects", "effects_app", True),
    "demo": ("demo", "demo_app", True),
    "keys": ("keys", "keys_app", True),
    "ca": ("ca", "ca_app", True),
    "contracts": ("contracts", "contracts_app", True),
    "migrate": ("migrate", "migrate", False),
    "serve": ("serve", "serve", False),
    "init": ("init", "init", False),
    "up": ("up", "up", False),
    "reconciler": ("reconciler", "reconciler", False),
    "doctor": ("doctor", "doctor", False),
    "bench": ("bench", "bench", False),
    "mcp": ("mcp", "mcp", False),
}

# The first line of each command's help, for the top-level help without the imports.
SUMMARIES: dict[str, str] = {
    "routes": "Inspect and validate routes.yaml.",
    "tenants": "Manage gateway tenants and their API keys.",
    "effects": "List, inspect, reconcile and resolve effects through the admin API.",
    "demo": "Demonstrations that run real processes against a real PostgreSQL.",
    "keys": "Master keys: what each protects, and rotation.",
    "ca": "The local CA for HTTPS interception.",
    "contracts": "Check that targets keep what their contracts claim.",
    "migrate": "Apply pending migrations; safe to run again and from several places at "
    "once.",
    "serve": "Serve the proxy (default 127.0.0.1:8080) and admin API (127.0.0.1:8081).",
    "init": "Write a commented starter routes.yaml here (never overwrites one).",
    "up": "Start everything: embedded PostgreSQL, proxy, admin API (--demo: a demo "
    "target).",
    "reconciler": "Settle lost responses: any number may run against one ledger.",
    "doctor": "Check routes, secrets, master key, database, migrations, clock, CA, "
    "upstreams.",
    "bench": "Benchmark effect-broker against a bare proxy (runs bench/run.py from "
    "here).",
    "mcp": "Serve list_unknown_effects, get_effect, get_receipt and "
    "request_reconciliation over stdio (the default) or Streamable HTTP, calling the "
    "admin API. Over HTTP every request must carry the admin token as "
    "`Authorization: Bearer <token>`.",
}


def installed_version() -> str:
    try:
        return version("effect-broker")
    except PackageNotFoundError:  # a source tree that was never installed
        from effect_broker import __version__

        return __version__


def _print_version(value: bool) -> None:
    if value:
        typer.echo(f"effect-broker {installed_version()}")
        raise typer.Exit()


@app.callback()
def _root(
    show_version: Annotated[
        bool,
        typer.Option(
            "--version",
            callback=_print_version,
            is_eager=True,
            help="Print the version and exit.",
        ),
    ] = False,
) -> None:
    """A sidecar HTTP proxy that makes side-effecting tool calls safe to retry."""


_registered: set[str] = set()
_summarised = False


def _add(name: str) -> None:
    if name in _registered:
        return
    _registered.add(name)
    module_name, attribute, group = COMMANDS[name]
    target = getattr(import_module(f"effect_broker.cli.{module_name}"), attribute)
    if group:
        app.add_typer(target, name=name)
    else:
        app.command(name=name)(target)


def _register(only: str | None = None) -> None:
    """Attach command groups (all, or ``only`` one); calling again is a no-op."""
    for name in [only] if only else COMMANDS:
        _add(name)


def _register_summaries() -> None:
    """Every command by name and summary only: enough for the top-level help."""
    global _summarised
    if _summarised:
        return
    _summarised = True
    for name, summary in SUMMARIES.items():
        if COMMANDS[name][2]:
            app.add_typer(typer.Typer(help=summary), name=name)
        else:
            app.command(name=name, help=summary)(_never_called)


def _never_called() -> None:  # pragma: no cover - a placeholder for the help only
    raise typer.Exit(2)


def _command_asked(argv: list[str]) -> str | None:
    """The command the arguments name, if any (options come before it)."""
    for argument in argv:
        if not argument.startswith("-"):
            return argument
    return None


def main() -> None:
    asked = _command_asked(sys.argv[1:])
    if asked in COMMANDS:
        _register(asked)
    elif asked is None:
        _register_summaries()
    else:
        _register()  # an unknown word: let Typer list what there is
    app()
