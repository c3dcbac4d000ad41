"""The crash matrix's report at 80 columns and piped: its 160-column table shrank the
verdict columns to nothing, and the run ended "No violation" over a table that showed
no verdicts. Narrow terminals get one block per cell, verdict first."""

from __future__ import annotations

import io
from pathlib import Path

from rich.console import Console

from effect_broker.demo.crash_matrix.agent import AgentResult
from effect_broker.demo.crash_matrix.ledger import Ledger
from effect_broker.demo.crash_matrix.report import report
from effect_broker.demo.crash_matrix.verdicts import CellResult, MatrixResult, Observation


def cell(mode: str, scenario: str, verdict: str, *violations: str) -> CellResult:
    agent = AgentResult(
        mode=mode,
        naive=False,
        outcome="answered",
        status=201,
        replayed=True,
        effect_status="succeeded",
        charge_id="ch_1",
        body="{}",
        attempts=2,
        history=("reset", "201 replayed"),
        seconds=0.5,
    )
    ledger = Ledger("succeeded", 2, 5, False, None, "response", "proxy")
    seen = Observation(mode, scenario, 1, ledger, (agent,))
    return CellResult(mode, scenario, 1.0, verdict, violations, seen, Path("/logs"))


def printed(result: MatrixResult, width: int) -> str:
    out = io.StringIO()
    report(Console(file=out, width=width, force_terminal=False), result)
    return out.getvalue()


def test_every_verdict_is_readable_at_80_columns() -> None:
    result = MatrixResult(
        (
            cell("idempotent", "after_upstream_send", "exactly one charge"),
            cell("unsafe", "sigkill-in-flight", "no duplicate, outcome_unknown shown"),
            cell("reconcilable", "zombie", "", "2 charges: the proxy made a duplicate"),
        ),
        12.0,
        Path("/work"),
    )

    text = printed(result, 80)

    assert max(len(line) for line in text.splitlines()) <= 80
    assert "ok: exactly one charge" in text
    assert "ok: no duplicate, outcome_unknown shown" in text
    assert "VIOLATION: 2 charges: the proxy made a duplicate" in text
    assert "charges 1, effect succeeded, sent 2x, receipt yes (response)" in text
    assert text.splitlines()[0] == "crash matrix: 3 cells in 12s, 1 VIOLATION(S)"


def test_a_wide_terminal_keeps_the_table() -> None:
    result = MatrixResult(
        (cell("idempotent", "zombie", "exactly one charge"),), 1.0, Path()
    )

    text = printed(result, 200)

    assert "┃ mode" in text and "ok: exactly one charge" in text
