"""``effect-broker routes ...``: check a routes file before a proxy ever loads it, and
publish its JSON Schema so an editor can check it while it is written."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer
from rich.console import Console
from rich.table import Table

from effect_broker.cli.narrow import fitted
from effect_broker.cli.words import plural
from effect_broker.config.contracts import Contract, Route
from effect_broker.config.durations import format_duration
from effect_broker.config.routes_config import RoutesConfig
from effect_broker.config.routes_file import load_routes
from effect_broker.config.routes_schema import render_routes_schema
from effect_broker.errors import ConfigError
from effect_broker.models import SafetyClass

routes_app = typer.Typer(help="Inspect and validate routes.yaml.", no_args_is_help=True)

# Piped output (CI logs, files) should not be squeezed to rich's 80-column default.
_PIPE_WIDTH = 160
# Narrower than this, a table's cells would fold mid-word: print blocks instead.
_TABLE_WIDTH = 120


@routes_app.command("validate")
def validate(
    path: Annotated[Path, typer.Argument(help="The routes file to check.")],
) -> None:
    """Validate a routes file and show what it routes; exit 1 with every issue if not."""
    try:
        config = load_routes(path)
    except ConfigError as exc:
        for issue in exc.issues:
            typer.echo(str(issue), err=True)
        count = len(exc.issues)
        typer.echo(f"{path}: {count} issue{'s' if count != 1 else ''}", err=True)
        raise typer.Exit(1) from None
    console = Console()
    if not console.is_terminal:
        console = Console(width=_PIPE_WIDTH)
    print_tables(console, config)
    count = len(config.routes)
    console.print(f"{path}: valid ({plural(count, 'route')})")


def print_tables(console: Console, config: RoutesConfig) -> None:
    """Routes, MCP tools and contracts; as blocks in a terminal too narrow for them."""
    console.print(fitted(console, routes_table(config), needs=_TABLE_WIDTH))
    for route in config.routes:
        if route.mcp is not None:
            console.print(fitted(console, mcp_tools_table(route), needs=_TABLE_WIDTH))
    console.print(fitted(console, contracts_table(config), needs=_TABLE_WIDTH))


@routes_app.command("schema")
def schema() -> None:
    """Print the JSON Schema of routes.yaml, as committed in routes.schema.json.

    Point an editor at it with a first line such as
    # yaml-language-server: $schema=./routes.schema.json
    """
    typer.echo(render_routes_schema(), nl=False)


def routes_table(config: RoutesConfig) -> Table:
    table = Table(title="Routes", title_justify="left")
    for column in ("name", "method", "host", "path", "upstream", "contract", "safety"):
        table.add_column(column, overflow="fold")
    for route in config.routes:
        if route.mcp is None:
            contract, safety = route.contract.ref, route.contract.safety.value
        else:  # its placeholder contract records nothing: each tool has its own
            contract, safety = "(MCP: per tool)", "(per tool)"
        table.add_row(
            route.name,
            ",".join(sorted(route.match.methods)),
            route.match.host or "(reverse)",
            route.match.path,
            route.upstream or "(request host)",
            contract,
            safety,
        )
    return table


def mcp_tools_table(route: Route) -> Table:
    """What an MCP route does with each ``tools/call``: a configured tool is recorded
    under its contract, a read-only one passes unrecorded, any other is refused or
    passed by the route's ``unclassified`` policy. An operator reads here, before a
    call is ever made, which tools can be charged twice and which cannot."""
    mcp = route.mcp
    assert mcp is not None
    table = Table(
        title=f"MCP tools on {route.name} (operation key argument: "
        f"{mcp.operation_key_argument})",
        title_justify="left",
    )
    for column in ("tool", "contract", "safety", "downstream key", "on tools/call"):
        table.add_column(column, overflow="fold")
    for tool, contract in sorted(mcp.tools.items()):
        table.add_row(
            tool,
            contract.ref,
            contract.safety.value,
            downstream_key_place(contract),
            "recorded",
        )
    for tool in sorted(mcp.read_only):
        table.add_row(tool, "-", "read-only", "-", "passed through, unrecorded")
    if mcp.unclassified == "reject":
        policy = "refused (unclassified: reject)"
    else:
        policy = "passed through, unrecorded (unclassified: pass)"
    table.add_row("(any other tool)", "-", "-", "-", policy)
    return table


def downstream_key_place(contract: Contract) -> str:
    """Where the target receives the derived key: a header, or an MCP tool argument."""
    if contract.idempotency_argument is not None:
        return f"argument {contract.idempotency_argument}"
    if contract.safety is SafetyClass.TRANSACTIONAL:
        return f"{contract.downstream_header} (a new key per attempt)"
    return contract.downstream_header or "-"


def contracts_table(config: RoutesConfig) -> Table:
    table = Table(title="Contracts", title_justify="left")
    columns = (
        "name",
        "version",
        "safety",
        "downstream key",
        "retention",
        "settlement bound",
        "timeout",
        "retry limit",
    )
    for column in columns:
        table.add_column(column, overflow="fold")
    for contract in config.contracts.values():
        retention, bound = contract.key_retention, contract.settlement_bound
        table.add_row(
            contract.name,
            contract.version,
            contract.safety.value,
            downstream_key_place(contract),
            format_duration(retention) if retention is not None else "-",
            format_duration(bound) if bound is not None else "-",
            format_duration(contract.timeout),
            str(contract.retry_limit),
        )
    return table
