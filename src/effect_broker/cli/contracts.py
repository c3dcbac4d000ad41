"""``effect-broker contracts verify ROUTE``: check a target against its contract.

It sends real requests to the route's upstream (a sandbox, never production: each
check creates effects there), so it refuses to run without
``--i-understand-this-sends-requests``.
"""

from __future__ import annotations

import asyncio
import json
import os
from pathlib import Path
from typing import Annotated

import aiohttp
import typer
from rich.console import Console
from rich.table import Table

from effect_broker.config.contracts import Route
from effect_broker.config.durations import parse_duration
from effect_broker.config.presets import preset_for
from effect_broker.config.routes_file import load_routes
from effect_broker.conformance import (
    Report,
    SandboxRequest,
    Verdict,
    VerifyOptions,
    sandbox_for,
    verify,
)
from effect_broker.errors import ConfigError

contracts_app = typer.Typer(
    help="Check that targets keep what their contracts claim.", no_args_is_help=True
)

#: A body the demo payment target accepts, and the same charge with another amount.
DEFAULT_BODY = '{"amount": 100, "currency": "usd", "order_id": "contract-check"}'
DEFAULT_DRIFT = '{"amount": 101, "currency": "usd", "order_id": "contract-check"}'
_PIPE_WIDTH = 160


def _fail(message: str, code: int = 2) -> typer.Exit:
    typer.echo(f"effect-broker contracts verify: {message}", err=True)
    return typer.Exit(code)


def _route(routes: Path, name: str) -> Route:
    try:
        config = load_routes(routes)
    except ConfigError as exc:
        for issue in exc.issues:
            typer.echo(str(issue), err=True)
        raise _fail(f"{routes} is not a valid routes file") from None
    for route in config.routes:
        if route.name == name:
            if route.mcp is not None:
                raise _fail(f"route {name!r} is an MCP route; name an HTTP route")
            return route
    known = ", ".join(route.name for route in config.routes) or "none"
    raise _fail(f"no route named {name!r} in {routes}; routes: {known}")


@contracts_app.command("verify")
def verify_command(
    route_name: Annotated[
        str, typer.Argument(metavar="ROUTE", help="the route to check")
    ],
    routes: Annotated[
        Path, typer.Option(envvar="EFFECT_BROKER_ROUTES", help="the routes file")
    ] = Path("routes.yaml"),
    confirmed: Annotated[
        bool,
        typer.Option(
            "--i-understand-this-sends-requests",
            help="required: the checks create real effects at the route's upstream",
        ),
    ] = False,
    as_json: Annotated[bool, typer.Option("--json", help="one JSON document")] = False,
    path: Annotated[
        str | None,
        typer.Option(help="the request path (default: the route's match.path)"),
    ] = None,
    body: Annotated[
        str | None,
        typer.Option(
            help="the request body the target accepts (default: the preset's sample, "
            "else a charge the demo target accepts)"
        ),
    ] = None,
    drift_body: Annotated[
        str | None,
        typer.Option(
            help="another payload under the same key (default: the default body's "
            "drifted twin; none with a --body of your own)"
        ),
    ] = None,
    content_type: Annotated[
        str | None,
        typer.Option(help="the body's type (default: the preset's, else JSON)"),
    ] = None,
    retention_wait: Annotated[
        str | None,
        typer.Option(
            help="wait this long (e.g. 30s) and check the key is still remembered"
        ),
    ] = None,
) -> None:
    """Send real requests to ROUTE's upstream and judge each claim of its contract.

    Exit 1 when a claim is broken; a claim that cannot be checked is shown, not failed.
    """
    if not confirmed:
        raise _fail(
            "this sends real requests that create effects at the route's upstream; "
            "point the route at a sandbox and add --i-understand-this-sends-requests"
        )
    route = _route(routes, route_name)
    wait = None
    if retention_wait is not None:
        try:
            wait = parse_duration(retention_wait)
        except ValueError as exc:
            raise typer.BadParameter(str(exc), param_hint="--retention-wait") from None
    request = sample_request(route, path, body, drift_body, content_type)
    try:
        preset = preset_for(route.contract.ref)
        pointer = preset.sample.effect_id if preset else "/id"
        sandbox = sandbox_for(route, request, os.environ, effect_id_pointer=pointer)
    except ConfigError as exc:
        raise _fail("; ".join(issue.message for issue in exc.issues)) from None
    try:
        report = asyncio.run(verify(route, sandbox, VerifyOptions(retention_wait=wait)))
    except (aiohttp.ClientError, TimeoutError) as exc:
        reason = str(exc) or type(exc).__name__
        raise _fail(f"could not talk to {sandbox.url}: {reason}") from None
    if as_json:
        typer.echo(json.dumps(report.as_json(), indent=2))
    else:
        console = Console()
        if not console.is_terminal:
            console = Console(width=_PIPE_WIDTH)
        console.print(report_table(report))
    if not report.ok:
        raise typer.Exit(1)


def sample_request(
    route: Route,
    path: str | None,
    body: str | None,
    drift_body: str | None,
    content_type: str | None,
) -> SandboxRequest:
    """The request to send: what was given, else the preset's sample, else the demo
    target's charge. A drifted twin comes only with a default body: for a body of
    one's own, the drift must be given too (or that claim is not checked)."""
    preset = preset_for(route.contract.ref)
    if body is None:
        if preset is not None:
            body, twin = preset.sample.body, preset.sample.drift_body
            content_type = content_type or preset.sample.content_type
        else:
            body, twin = DEFAULT_BODY, DEFAULT_DRIFT
        drift_body = drift_body if drift_body is not None else twin
    return SandboxRequest(
        method=sorted(route.match.methods)[0],
        path=path or route.match.path,
        body=body.encode(),
        content_type=content_type or "application/json",
        drift_body=drift_body.encode() if drift_body is not None else None,
    )


def report_table(report: Report) -> Table:
    table = Table(
        title=f"{report.route}: contract {report.contract} ({report.safety}) at "
        f"{report.url}",
        title_justify="left",
    )
    for column in ("claim", "verdict", "evidence"):
        table.add_column(column, overflow="fold")
    styles = {Verdict.HELD: "green", Verdict.BROKEN: "bold red"}
    for claim in report.claims:
        style = styles.get(claim.verdict, "yellow")
        table.add_row(claim.claim, f"[{style}]{claim.verdict}[/]", claim.evidence)
    return table
