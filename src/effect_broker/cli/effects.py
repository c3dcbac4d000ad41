"""``effect-broker effects ...``: the admin API for a person at a terminal.

A thin client: every decision (what may be resolved, what a contract can prove) is the
broker's, so the CLI and the HTTP API can never disagree. It uses the standard library's
urllib, without proxies: the agent's ``HTTP_PROXY`` often points at effect-broker itself,
and admin calls must not go through the proxy port.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from contextlib import contextmanager
from enum import StrEnum
from typing import Annotated, Any

import typer
from rich.console import Console
from rich.text import Text

from effect_broker.cli.effects_show import (
    STATUS_STYLES,
    print_effect,
    print_history,
    print_request,
    status_text,
)
from effect_broker.cli.effects_table import effects_table
from effect_broker.cli.local_state import DEFAULT_ADMIN_URL, admin_access, using
from effect_broker.cli.words import plural
from effect_broker.client.admin import AdminProblem, AdminUnreachable, EffectsClient

effects_app = typer.Typer(
    help="List, inspect, reconcile and resolve effects through the admin API.",
    no_args_is_help=True,
)

AdminUrl = Annotated[
    str | None,
    typer.Option(
        "--admin-url",
        envvar="EFFECT_BROKER_ADMIN_URL",
        help="admin API base URL [default: that of an `effect-broker up` running "
        f"from this folder, else {DEFAULT_ADMIN_URL}]",
        show_default=False,
    ),
]
Token = Annotated[
    str | None,
    typer.Option(
        "--token",
        envvar="EFFECT_BROKER_ADMIN_TOKEN",
        help="bearer token: the sidecar's admin token, or a gateway tenant's API key",
        show_default=False,
    ),
]


class As(StrEnum):
    """What the operator found out, in the admin API's words."""

    SUCCEEDED = "succeeded"
    NOT_COMMITTED = "not_committed"
    DID_NOT_HAPPEN = "did_not_happen"
    ABANDONED = "abandoned"
    FAILED = "failed"  # deprecated: the admin API records it as abandoned


def _out() -> Console:
    return Console(highlight=False)


@contextmanager
def _reported() -> Iterator[None]:
    """Print a refusal or an unreachable broker to stderr and exit 1."""
    err = Console(stderr=True, highlight=False)
    try:
        yield
    except AdminProblem as exc:
        err.print(f"[bold red]error {exc.status}:[/] {exc.title}", markup=True)
        err.print(Text(exc.detail))
        raise typer.Exit(1) from None
    except AdminUnreachable as exc:
        err.print(Text("error: ", style="bold red") + Text(str(exc)))
        raise typer.Exit(1) from None


def _client(admin_url: str | None, token: str | None) -> EffectsClient:
    """The admin client; with a flag or variable unset, what ``up`` left here (said)."""
    admin_url, token, used = admin_access(admin_url, token)
    if used:
        Console(stderr=True, highlight=False, soft_wrap=True).print(using(used))
    return EffectsClient(admin_url, token)


MAX_PREFIX_PAGES = 20


def _full_id(client: EffectsClient, effect_id: str) -> str:
    """The whole id of an effect named by its id or, as ``list`` shows it, a prefix.

    The API takes whole ids only, so a prefix is looked up in the newest effects (a
    bounded scan); an ambiguous or unknown prefix is an error that says what to do.
    """
    digits = effect_id.replace("-", "").lower()
    if (
        len(digits) >= 32
        or not digits
        or any(c not in "0123456789abcdef" for c in digits)
    ):
        return effect_id
    matches: list[str] = []
    cursor = None
    for _ in range(MAX_PREFIX_PAGES):
        page = client.list(limit=500, cursor=cursor)
        matches += [
            e["id"]
            for e in page["effects"]
            if e["id"].replace("-", "").startswith(digits)
        ]
        cursor = page.get("next_cursor")
        if len(matches) > 1 or not cursor:
            break
    if len(matches) != 1:
        found = "matches several effects" if matches else "matches no recent effect"
        raise typer.BadParameter(
            f"{effect_id!r} {found}; give the whole id "
            "(`effect-broker effects list --output json` shows it)",
            param_hint="EFFECT_ID",
        )
    return matches[0]


class Output(StrEnum):
    """How ``effects list`` prints: a table for people, JSON for programs."""

    TABLE = "table"
    JSON = "json"


@effects_app.command("list")
def list_effects(
    status: Annotated[
        list[str] | None,
        typer.Option("--status", help="only this status; repeat for several"),
    ] = None,
    route: Annotated[str | None, typer.Option("--route", help="only this route")] = None,
    prefix: Annotated[
        str | None, typer.Option("--prefix", help="only operation keys starting so")
    ] = None,
    older_than: Annotated[
        float | None,
        typer.Option("--older-than", help="only effects created this many seconds ago"),
    ] = None,
    limit: Annotated[int, typer.Option("--limit", min=1, max=500)] = 50,
    cursor: Annotated[
        str | None, typer.Option("--cursor", help="next page, as printed")
    ] = None,
    output: Annotated[
        Output,
        typer.Option(
            "--output",
            "-o",
            help="table (ids shortened to 8 hex digits; `inspect` shows the whole id) "
            "or json (the admin API's effect objects, one array)",
            case_sensitive=False,
        ),
    ] = Output.TABLE,
    as_json: Annotated[
        bool, typer.Option("--json", help="the same as --output json", hidden=True)
    ] = False,
    admin_url: AdminUrl = None,
    token: Token = None,
) -> None:
    """List effects, newest first; unknown and manual-review ones stand out."""
    with _reported():
        page = _client(admin_url, token).list(
            status=status or [],
            route=route,
            operation_key_prefix=prefix,
            older_than=older_than,
            cursor=cursor,
            limit=limit,
        )
    effects: list[dict[str, Any]] = page["effects"]
    more = f"more: add --cursor {page['next_cursor']}" if page.get("next_cursor") else ""
    if as_json or output is Output.JSON:
        # Only the array on stdout, so `| jq` works; the next page's cursor on stderr.
        typer.echo(json.dumps(effects, indent=2, ensure_ascii=False))
        if more:
            Console(stderr=True, highlight=False, soft_wrap=True).print(more)
        return
    out = _out()
    if effects:
        out.print(effects_table(effects, out.width, STATUS_STYLES.get))
    unknown = sum(effect["status"] == "outcome_unknown" for effect in effects)
    review = sum(effect["status"] == "manual_review" for effect in effects)
    summary = f"{plural(len(effects), 'effect')}, {unknown} unknown"
    if review:
        summary += f", {review} in manual review"
    out.print(Text(summary, style="bold red" if unknown else ""))
    if more:
        out.print(more, soft_wrap=True)


@effects_app.command("inspect")
def inspect(
    effect_id: Annotated[
        str,
        typer.Argument(
            help="the effect's id (Effect-Id header) or the start `list` shows"
        ),
    ],
    at_sequence: Annotated[
        int | None,
        typer.Option("--at-sequence", min=1, help="also show the state after event N"),
    ] = None,
    as_json: Annotated[bool, typer.Option("--json", help="print the raw JSON")] = False,
    admin_url: AdminUrl = None,
    token: Token = None,
) -> None:
    """Show one effect, what its contract can prove, and its event history."""
    with _reported():
        client = _client(admin_url, token)
        effect = client.inspect(_full_id(client, effect_id), at_sequence=at_sequence)
    out = _out()
    if as_json:
        out.print_json(data=effect)
        return
    print_effect(out, effect)
    out.print()
    out.print(Text("Guarantee: ", style="bold") + Text(effect["guarantee"]))
    out.print()
    print_request(out, effect.get("request"))
    print_history(out, effect["history"])
    if effect["chain_intact"]:
        out.print(Text("event chain intact: every digest verifies", style="green"))
    else:
        out.print(Text("EVENT CHAIN BROKEN: the history was altered", style="bold red"))
    folded = effect.get("at_sequence")
    if folded:
        out.print(
            Text(f"after event {folded['seq']}: ")
            + status_text(folded["status"])
            + Text(
                f" ({folded['last_kind']} by {folded['last_actor']}, "
                f"{plural(folded['attempts'], 'attempt')})"
            )
        )


@effects_app.command("reconcile")
def reconcile(
    effect_id: Annotated[str, typer.Argument(help="the effect's id")],
    admin_url: AdminUrl = None,
    token: Token = None,
) -> None:
    """Have the reconciler look at an effect now (never resends an unsafe one)."""
    with _reported():
        client = _client(admin_url, token)
        effect = client.reconcile(_full_id(client, effect_id))
    _out().print(
        Text(f"effect {effect['id']} is ")
        + status_text(effect["status"])
        + Text("; the reconciler looks at it on its next pass")
    )


def _evidence(pairs: list[str]) -> dict[str, str]:
    evidence: dict[str, str] = {}
    for pair in pairs:
        key, sep, value = pair.partition("=")
        if not sep or not key.strip():
            raise typer.BadParameter(
                f"{pair!r} is not KEY=VALUE", param_hint="--evidence"
            )
        evidence[key.strip()] = value
    return evidence


@effects_app.command("resolve")
def resolve(
    effect_id: Annotated[str, typer.Argument(help="the effect's id")],
    resolution: Annotated[
        As,
        typer.Option(
            "--as",
            help="succeeded: it happened (evidence required; the agent's retry gets "
            "this receipt); not_committed: it did not, send it again with the same "
            "key (idempotent and reconcilable only); did_not_happen: it did not, with "
            "proof (evidence required; the agent is told it may send it again under a "
            "new Operation-Key); abandoned: give up without knowing (the agent is told "
            "it may have happened). failed is the deprecated word for abandoned",
            case_sensitive=False,
        ),
    ],
    reason: Annotated[
        str, typer.Option("--reason", help="why; kept in the effect's history")
    ],
    evidence: Annotated[
        list[str] | None,
        typer.Option(
            "--evidence",
            help="KEY=VALUE proof, repeatable; required for succeeded and "
            "did_not_happen "
            "(e.g. --evidence checked_in='stripe dashboard')",
        ),
    ] = None,
    external_id: Annotated[
        str | None, typer.Option("--external-id", help="the target's id for it")
    ] = None,
    admin_url: AdminUrl = None,
    token: Token = None,
) -> None:
    """Settle an unknown or manual-review effect by hand, with a reason and evidence."""
    with _reported():
        client = _client(admin_url, token)
        effect = client.resolve(
            _full_id(client, effect_id),
            resolution.value,
            reason,
            evidence=_evidence(evidence or []),
            external_id=external_id,
        )
    out = _out()
    word = As.ABANDONED if resolution is As.FAILED else resolution
    if resolution is As.FAILED:
        out.print("note: `failed` is the deprecated word for `abandoned`")
    out.print(
        Text(f"effect {effect['id']} resolved as {word.value}; status now ")
        + status_text(effect["status"])
    )
    if effect["status"] == "prepared":
        out.print("it is sent again on the next client retry or reconciler pass")
