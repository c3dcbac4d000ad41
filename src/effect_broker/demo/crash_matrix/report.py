"""The crash matrix as a person reads it: one table row per cell, then every violation."""

from __future__ import annotations

from rich.console import Console
from rich.table import Table

from effect_broker.demo.crash_matrix.verdicts import (
    BY,
    MODES,
    NAIVE,
    SCENARIOS,
    CellResult,
    MatrixResult,
    Observation,
    cell_count,
)

# --------------------------------------------------------------------------- report


def render(result: MatrixResult) -> Table:
    """(mode, scenario) -> target charges, effect status, receipt, agent, verdict.

    "sent" is how many dispatch attempts the ledger recorded: more than one with a
    single charge is the proof doing its work (a redispatch the target deduplicated).
    """
    title = f"crash matrix: {len(result.cells)} cells in {result.seconds:.0f}s, " + (
        "no violation" if result.ok else f"{len(result.violations)} VIOLATION(S)"
    )
    table = Table(title=title, title_justify="left")
    columns = ("mode", "scenario", "charges", "effect status", "sent", "receipt")
    for column in columns:
        numeric = column in ("charges", "sent")
        table.add_column(column, justify="right" if numeric else "left", no_wrap=True)
    table.add_column("agent finally saw")
    table.add_column("verdict", min_width=30)
    cells = result.cells
    for index, cell in enumerate(cells):
        seen = cell.observation
        ledger = seen.ledger if seen else None
        first_of_mode = index == 0 or cells[index - 1].mode != cell.mode
        last_of_mode = index + 1 < len(cells) and cells[index + 1].mode != cell.mode
        table.add_row(
            cell.mode if first_of_mode else "",
            cell.scenario,
            str(seen.charges) if seen else "?",
            ledger.status if ledger else ("-" if cell.scenario == NAIVE else "?"),
            f"{ledger.attempts}x" if ledger else "-",
            _receipt(cell),
            _agents(seen),
            _verdict(cell),
            end_section=last_of_mode,
        )
    return table


def _receipt(cell: CellResult) -> str:
    if cell.scenario == NAIVE:
        return "-"
    ledger = cell.observation.ledger if cell.observation else None
    if ledger is None:
        return "?"
    return f"yes ({ledger.receipt_source})" if ledger.receipt_source else "no"


def _agents(seen: Observation | None) -> str:
    if seen is None:
        return "?"
    if len(seen.agents) > 1:
        fine = sum(1 for result in seen.agents if result.final_2xx)
        replayed = sum(1 for result in seen.agents if result.replayed)
        return f"{fine}/{len(seen.agents)} 2xx, {replayed} replayed"
    (result,) = seen.agents
    if not result.history:
        return "nothing"
    if seen.scenario == NAIVE:  # why it charged twice: the first answer never came
        return ", then ".join(result.history)
    tries = "1 try" if result.attempts == 1 else f"{result.attempts} tries"
    return f"{result.history[-1]} ({tries})"


def _verdict(cell: CellResult) -> str:
    if not cell.ok:
        return "[bold red]VIOLATION[/]: " + "; ".join(cell.violations)
    if cell.expected_duplicate:
        return f"[yellow]{cell.verdict}[/]"
    return f"[green]ok[/]: {cell.verdict}"


def report(console: Console, result: MatrixResult) -> None:
    """The table, then every violation spelled out with where its logs are."""
    console.print(render(result))
    for cell in result.cells:
        for violation in cell.violations:
            console.print(
                f"[bold red]violation[/] {cell.mode}{BY}{cell.scenario}: {violation} "
                f"(logs: {cell.logs})",
                highlight=False,
            )
    complete = len(result.cells) == cell_count(MODES, SCENARIOS)
    if result.ok and complete:
        console.print(
            "[green]The proxy left exactly one charge on the idempotent, reconcilable "
            "and transactional targets, no duplicate and a visible outcome_unknown on "
            "the unsafe one; the naive client double-charged.[/]"
        )
    elif result.ok:
        console.print(f"[green]No violation in the {len(result.cells)} cells run.[/]")
