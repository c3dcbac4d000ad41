"""The crash matrix as a person reads it: one table row per cell, then every violation.

The table needs about 160 columns; in a narrower terminal, or piped (80 columns), each
cell is printed as a short block instead, verdict first, so no verdict is ever cut down
to nothing under a line that says there was no violation.
"""

from __future__ import annotations

import textwrap

from rich.console import Console, Group
from rich.table import Table
from rich.text import Text

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

#: Narrower than this, the table's verdict column would be squeezed: print blocks.
TABLE_WIDTH = 150


def _title(result: MatrixResult) -> str:
    return f"crash matrix: {len(result.cells)} cells in {result.seconds:.0f}s, " + (
        "no violation" if result.ok else f"{len(result.violations)} VIOLATION(S)"
    )


def render_narrow(result: MatrixResult, width: int) -> Group:
    """One block per cell, verdict first, the facts below it; wrapped between words
    to ``width`` (no trailing blanks, so a pipe gets clean lines)."""

    def wrapped(text: str, indent: int, style: str) -> list[Text]:
        pad = " " * indent
        lines = textwrap.wrap(
            text, width, initial_indent=pad, subsequent_indent=pad + "  "
        )
        return [Text(line, style=style) for line in lines]

    lines: list[Text] = [Text(_title(result), style="bold")]
    for index, cell in enumerate(result.cells):
        if index == 0 or result.cells[index - 1].mode != cell.mode:
            lines += [Text(""), Text(cell.mode, style="bold")]
        verdict = Text.from_markup(_verdict(cell))
        style = "red" if not cell.ok else "yellow" if cell.expected_duplicate else ""
        lines += wrapped(f"{cell.scenario}: {verdict.plain}", 2, style)
        seen = cell.observation
        ledger = seen.ledger if seen else None
        facts = [
            f"charges {seen.charges if seen else '?'}",
            f"effect {ledger.status if ledger else '-'}",
            f"sent {ledger.attempts}x" if ledger else "sent -",
            f"receipt {_receipt(cell)}",
            f"agent {_agents(seen)}",
        ]
        lines += wrapped(", ".join(facts), 4, "dim")
    return Group(*lines)


def render(result: MatrixResult) -> Table:
    """(mode, scenario) -> target charges, effect status, receipt, agent, verdict.

    "sent" is how many dispatch attempts the ledger recorded: more than one with a
    single charge is the proof doing its work (a redispatch the target deduplicated).
    """
    table = Table(title=_title(result), title_justify="left")
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
    """The table (blocks when narrow), then every violation with where its logs are."""
    wide = console.width >= TABLE_WIDTH
    console.print(render(result) if wide else render_narrow(result, console.width))
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
