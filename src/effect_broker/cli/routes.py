"""``effect-broker routes ...``: check a routes file before a proxy ever loads it, and
publish its JSON Schema so an editor can check it while it is written."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer
from rich.console import Console
from rich.table import Table

from effect_broker.config.durations import format_duration
from effect_broker.config.routes_config import RoutesConfig
from effect_broker.config.routes_file import load_routes
from effect_broker.config.routes_schema import render_routes_schema
from effect_broker.errors import ConfigError
from effect_broker.models import SafetyClass

routes_app = typer.Typer(help="Inspect and validate routes.yaml.", no_args_is_help=True)

# Piped output (CI logs, files) should not be squeezed to rich's 80-column default.
_PIPE_WIDTH = 160


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
    console.print(routes_table(config))
    console.print(contracts_table(config))
    console.print(f"{path}: valid ({len(config.routes)} routes)")


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
        table.add_row(
            route.name,
            ",".join(sorted(route.match.methods)),
            route.match.host or "(reverse)",
            route.match.path,
            route.upstream or "(request host)",
            route.contract.ref,
            route.contract.safety.value,
        )
    return table


def contracts_table(config: RoutesConfig) -> Table:
    table = Table(title="Contracts", title_justify="left")
    columns = (
        "name",
        "version",
        "safety",
        "downstream header",
        "retention",
        "settlement bound",
        "timeout",
        "retry limit",
    )
    for column in columns:
        table.add_column(column, overflow="fold")
    for contract in config.contracts.values():
        retention, bound = contract.key_retention, contract.settlement_bound
        header = contract.downstream_header or "-"
        if contract.safety is SafetyClass.TRANSACTIONAL:
            header += " (a new key per attempt)"
        table.add_row(
            contract.name,
            contract.version,
            contract.safety.value,
            header,
            format_duration(retention) if retention is not None else "-",
            format_duration(bound) if bound is not None else "-",
            format_duration(contract.timeout),
            str(contract.retry_limit),
        )
    return table
