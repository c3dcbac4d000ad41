"""``effect-broker demo``: the proof (``crash-matrix``) and the agent demo (``agent``).

The matrix ships in the package (``effect_broker.demo.crash_matrix``, beside the demo
payment target it starts), so this command runs from any folder of any installation,
not only from a checkout.
"""

from __future__ import annotations

import asyncio
import os
import secrets
import shutil
import tempfile
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from pathlib import Path
from typing import Annotated

import typer
from rich.console import Console

from effect_broker.demo import agent, crash_matrix, explorer
from effect_broker.embedded import EmbeddedPostgresUnavailable, embedded_postgres

demo_app = typer.Typer(
    help="Demonstrations that run real processes against a real PostgreSQL.",
    no_args_is_help=True,
)


@contextmanager
def postgres_server(database_url: str | None, scratch: Path) -> Iterator[str]:
    """The given server, or a throwaway embedded one (fsync off: nothing here is kept)."""
    if database_url:
        yield database_url
        return
    with ExitStack() as stack:
        try:
            dsn = stack.enter_context(
                embedded_postgres(scratch / "postgres", durable=False, keep_data=False)
            )
        except EmbeddedPostgresUnavailable as exc:
            typer.echo(f"error: {exc.message} Or pass --database-url.", err=True)
            raise typer.Exit(2) from None
        yield dsn


def _known(kind: str, given: list[str] | None, known: tuple[str, ...]) -> list[str]:
    """The ``--mode``/``--scenario`` values, all of them when none is given."""
    for value in given or ():
        if value not in known:
            raise typer.BadParameter(
                f"{value!r} is not one of: {', '.join(known)}", param_hint=f"--{kind}"
            )
    return list(given or known)


@demo_app.command("crash-matrix")
def crash_matrix_command(
    database_url: Annotated[
        str | None,
        typer.Option(
            "--database-url",
            help="a PostgreSQL server on which the matrix may create and drop "
            "databases [default: an embedded PostgreSQL in a temporary directory]",
        ),
    ] = None,
    workdir: Annotated[
        Path | None,
        typer.Option(help="keep every cell's logs and ledger history here"),
    ] = None,
    parallel: Annotated[int, typer.Option(min=1, help="cells run at once")] = 3,
    mode: Annotated[
        list[str] | None,
        typer.Option(help="only this safety class (repeatable) [default: all]"),
    ] = None,
    scenario: Annotated[
        list[str] | None,
        typer.Option(help="only this scenario (repeatable) [default: all]"),
    ] = None,
) -> None:
    """Kill the proxy at every failpoint, freeze it, race it; count the target's charges.

    Exits 1 if any cell breaks its rule (the rules: effect_broker/demo/crash_matrix/
    verdicts.py).
    """
    modes = _known("mode", mode, crash_matrix.MODES)
    scenarios = _known("scenario", scenario, crash_matrix.SCENARIOS)
    console = Console()
    if not console.is_terminal:
        console = Console(width=160)  # a log or a pipe: room for the table's verdicts
    scratch = Path(tempfile.mkdtemp(prefix="effect-broker-crash-matrix-"))
    cells = workdir or scratch / "cells"
    try:
        with postgres_server(database_url, scratch) as server:
            if database_url is None:
                console.print("embedded PostgreSQL started", highlight=False)
            result = crash_matrix.run_matrix(
                server,
                cells,
                progress=lambda line: console.print(line, highlight=False),
                modes=modes,
                scenarios=scenarios,
                parallel=parallel,
            )
        crash_matrix.report(console, result)
    finally:
        shutil.rmtree(scratch / "postgres", ignore_errors=True)
    if result.ok:
        if workdir is None:
            shutil.rmtree(scratch, ignore_errors=True)
        return
    console.print(f"cell logs and ledger histories kept in {cells}", highlight=False)
    raise typer.Exit(1)


@demo_app.command("explore")
def explore_command(
    minutes: Annotated[
        float, typer.Option(min=0.0, help="keep starting rounds for this long")
    ] = 2.0,
    seed: Annotated[
        int | None,
        typer.Option(help="round n runs seed + n [default: a random seed, printed]"),
    ] = None,
    proxies: Annotated[
        int, typer.Option(min=2, help="effect-broker serve processes on one ledger")
    ] = 2,
    agents: Annotated[int, typer.Option(min=1, help="concurrent agents")] = 8,
    ops: Annotated[
        int, typer.Option(min=1, help="operations per round")
    ] = explorer.DEFAULT_OPS,
    rounds: Annotated[
        int | None, typer.Option(min=1, help="stop after this many rounds")
    ] = None,
    fault: Annotated[
        list[str] | None,
        typer.Option(help="only this fault kind (repeatable) [default: all]"),
    ] = None,
    within_lease: Annotated[
        bool,
        typer.Option(
            "--within-lease",
            help="leave out the faults that outlive a lease ("
            + ", ".join(sorted(explorer.OUTLIVE_LEASE))
            + ")",
        ),
    ] = False,
    database_url: Annotated[
        str | None,
        typer.Option(
            "--database-url",
            help="a PostgreSQL server on which rounds may create and drop databases "
            "(never restarted) [default: an embedded PostgreSQL of the run's own]",
        ),
    ] = None,
    workdir: Annotated[
        Path | None, typer.Option(help="keep every round's logs here")
    ] = None,
) -> None:
    """Random faults from a seed against many agents and several proxies; an oracle
    checks every operation key against the target's own table.

    Exits 1 if any round breaks a promise; its seed and faults are printed to replay.
    """
    kinds = _known("fault", fault, explorer.FAULT_KINDS)
    if within_lease:
        kinds = [kind for kind in kinds if kind not in explorer.OUTLIVE_LEASE]
    if database_url is not None and explorer.PG_RESTART in kinds:
        kinds.remove(explorer.PG_RESTART)  # never restart a server the run was given
    if not kinds:
        raise typer.BadParameter("no fault kind left to draw from", param_hint="--fault")
    first = seed if seed is not None else secrets.randbelow(1_000_000)
    console = Console()
    if not console.is_terminal:
        console = Console(width=160)  # a log or a pipe: one line per round
    scratch = Path(tempfile.mkdtemp(prefix="effect-broker-explore-"))
    scratch.chmod(0o755)  # an embedded server may run as another user
    logs = workdir or scratch / "rounds"
    console.print(
        f"seed {first}, {proxies} proxies, {agents} agents, {ops} ops a round, "
        f"faults: {', '.join(kinds)} (each round's schedule follows from its seed; "
        "the operating system's timing does not)",
        highlight=False,
        soft_wrap=True,
    )
    owned = None if database_url else explorer.OwnedPostgres(scratch / "postgres")
    result: explorer.Exploration | None = None
    try:
        server = owned.start() if owned is not None else str(database_url)
        result = explorer.explore(
            server,
            logs,
            explorer.schedules(
                first, proxies=proxies, agents=agents, kinds=kinds, ops=ops
            ),
            minutes=minutes,
            rounds=rounds,
            postgres=owned,
            progress=lambda line: console.print(line, highlight=False, soft_wrap=True),
        )
    finally:
        if owned is not None:
            owned.cleanup()
        if workdir is not None or (result is not None and result.ok):
            shutil.rmtree(scratch, ignore_errors=True)  # logs elsewhere, or not needed
    _report_exploration(console, result)
    if not result.ok:
        raise typer.Exit(1)


def _report_exploration(console: Console, result: explorer.Exploration) -> None:
    total = sum(len(r.schedule.keys) for r in result.rounds)
    console.print(
        f"{len(result.rounds)} rounds, {total} operations in {result.seconds:.0f}s: "
        + ("no violation" if result.ok else f"{len(result.failed)} round(s) FAILED"),
        highlight=False,
    )
    for failed in result.failed:
        schedule = failed.schedule
        faults = (
            ""
            if set(schedule.kinds) == set(explorer.FAULT_KINDS)
            else "".join(f" --fault {kind}" for kind in schedule.kinds)
        )
        console.print(
            f"[bold red]seed {schedule.seed} failed[/] (replay: --seed {schedule.seed} "
            f"--rounds 1 --proxies {schedule.proxies} --agents {schedule.agents} "
            f"--ops {len(schedule.keys)}{faults}); logs in {failed.directory}",
            highlight=False,
        )
        for line in schedule.describe():
            console.print(f"  fault {line}", highlight=False)
        for violation in failed.verdict.violations[:20]:
            console.print(f"  violation: {violation}", highlight=False)
        if len(failed.verdict.violations) > 20:
            console.print(
                f"  ... {len(failed.verdict.violations) - 20} more", highlight=False
            )


@demo_app.command("agent")
def agent_command(
    provider: Annotated[
        str,
        typer.Option(
            help="who drives the agent: scripted (no network), openai ($OPENAI_API_KEY) "
            "or grok ($XAI_API_KEY)"
        ),
    ] = "scripted",
    kill_after_commit: Annotated[
        bool,
        typer.Option(
            "--kill-after-commit",
            help="kill the proxy right after the target committed the charge, then "
            "restart it",
        ),
    ] = False,
    model: Annotated[
        str | None, typer.Option(help="the provider's model (default: a small one)")
    ] = None,
    base_url: Annotated[
        str | None,
        typer.Option(help="an OpenAI-compatible API to use instead of the provider's"),
    ] = None,
    database_url: Annotated[
        str | None,
        typer.Option(
            "--database-url",
            help="a PostgreSQL server on which the demo may create and drop a database "
            "(default: an embedded PostgreSQL in a temporary directory)",
        ),
    ] = None,
    workdir: Annotated[
        Path | None, typer.Option(help="keep the processes' logs here")
    ] = None,
) -> None:
    """A model asks for one charge of order-42; the proxy makes the retry safe.

    Exits 1 unless the target's own table shows exactly one charge and the agent got it.
    """
    if provider not in agent.PROVIDER_NAMES:
        raise typer.BadParameter(
            f"{provider!r} is not one of: {', '.join(agent.PROVIDER_NAMES)}",
            param_hint="--provider",
        )
    chat: agent.ChatModel
    try:
        chat = (
            agent.ScriptedModel("order-42", 4200, "usd")
            if provider == agent.SCRIPTED
            else agent.provider_model(
                provider, dict(os.environ), model=model, base_url=base_url
            )
        )
    except agent.ProviderUnavailable as exc:
        typer.echo(f"effect-broker demo agent: {exc}", err=True)
        raise typer.Exit(2) from None
    console = Console(soft_wrap=True)  # one transcript line stays one line
    transcript = agent.Transcript(lambda line: console.print(line, highlight=False))
    scratch = Path(tempfile.mkdtemp(prefix="effect-broker-demo-agent-"))
    logs = workdir or scratch / "logs"
    keep = False  # the logs of a run that went wrong stay for whoever looks into it
    try:
        with postgres_server(database_url, scratch) as server:
            result = asyncio.run(
                agent.run_demo(
                    server, logs, chat, transcript, kill_after_commit=kill_after_commit
                )
            )
        if result.ok:
            how = "after the proxy was killed" if result.proxy_killed else "no failure"
            console.print(
                f"one charge for order-42, and the agent has its answer ({how})",
                highlight=False,
            )
            return
        keep = True
        console.print(
            f"NOT OK: {result.charges} charge(s) for order-42; logs kept in {logs}",
            highlight=False,
        )
        raise typer.Exit(1)
    except agent.ModelFailed as exc:
        typer.echo(f"effect-broker demo agent: {exc}", err=True)
        raise typer.Exit(1) from None
    finally:
        shutil.rmtree(scratch / "postgres", ignore_errors=True)
        if not keep:
            shutil.rmtree(scratch, ignore_errors=True)
