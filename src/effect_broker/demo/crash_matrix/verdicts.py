"""What a crash-matrix cell saw, and the rules that judge it.

Kept free of processes and sockets, so that the rules themselves can be tested on
made-up observations: a change that weakened them would have to change a test too.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from effect_broker import failpoints
from effect_broker.demo.crash_matrix.agent import AgentResult
from effect_broker.demo.crash_matrix.ledger import Ledger

TRANSACTIONAL = "transactional"
MODES = ("idempotent", "reconcilable", "unsafe", TRANSACTIONAL)
SIGKILL_IN_FLIGHT = "sigkill-in-flight"
#: the target commits, then streams its answer (chunked) and stops halfway: the proxy is
#: SIGKILLed while it passes that stream on.
SIGKILL_MID_STREAM = "sigkill-mid-stream"
CONCURRENT = "10-concurrent"
ZOMBIE = "zombie"
NAIVE = "naive"
#: transactional only: the attempt holds its transaction open after its change; the
#: proxy's tombstone commits first, so the attempt's own commit must fail.
TOMBSTONE_RACE = "tombstone-race"
#: transactional only: the attempt's receipt is written and its COMMIT held; the
#: tombstone must wait and lose, and the lookup find the commit: nothing is resent.
COMMIT_RACE = "commit-race"
TRANSACTIONAL_ONLY = frozenset({TOMBSTONE_RACE, COMMIT_RACE})
SCENARIOS = (
    *failpoints.ALL,
    SIGKILL_IN_FLIGHT,
    SIGKILL_MID_STREAM,
    CONCURRENT,
    ZOMBIE,
    TOMBSTONE_RACE,
    COMMIT_RACE,
    NAIVE,
)
#: Scenarios where the request may or may not have reached the target when the proxy
#: lost track of it. An unsafe target cannot say which, so the answer must be "unknown".
AMBIGUOUS = frozenset(
    {
        failpoints.BEFORE_UPSTREAM_SEND,
        failpoints.AFTER_UPSTREAM_RESPONSE,
        SIGKILL_IN_FLIGHT,
        SIGKILL_MID_STREAM,
        ZOMBIE,
    }
)
CONCURRENT_AGENTS = 10


def applies(mode: str, scenario: str) -> bool:
    """Whether a cell exists: the races need the kit's holds, so transactional only."""
    return mode == TRANSACTIONAL or scenario not in TRANSACTIONAL_ONLY


def cell_count(modes: Sequence[str], scenarios: Sequence[str]) -> int:
    return sum(applies(mode, scenario) for mode in modes for scenario in scenarios)


BY = " \u00d7 "  # mode x scenario, as the progress lines print it


@dataclass(frozen=True)
class Observation:
    """Everything a cell saw, before any judgement."""

    mode: str
    scenario: str
    charges: int
    ledger: Ledger | None
    agents: tuple[AgentResult, ...]  # one per agent
    fenced: float | None = None  # zombie: the first proxy's fenced-writes counter
    taken_over: bool | None = None  # zombie: the second proxy claimed and settled it
    second_proxy_kept_it: bool | None = None  # zombie: the woken one wrote nothing


@dataclass(frozen=True)
class CellResult:
    mode: str
    scenario: str
    seconds: float
    verdict: str
    violations: tuple[str, ...]
    observation: Observation | None
    logs: Path

    @property
    def ok(self) -> bool:
        return not self.violations

    @property
    def expected_duplicate(self) -> bool:
        return self.ok and self.scenario == NAIVE


@dataclass(frozen=True)
class MatrixResult:
    cells: tuple[CellResult, ...]
    seconds: float
    workdir: Path

    @property
    def violations(self) -> list[str]:
        return [
            f"{cell.mode}{BY}{cell.scenario}: {violation}"
            for cell in self.cells
            for violation in cell.violations
        ]

    @property
    def ok(self) -> bool:
        return not self.violations


# --------------------------------------------------------------------------- verdicts


def judge(seen: Observation) -> tuple[str, list[str]]:
    """The verdict for one cell and every rule it breaks (empty: it passes)."""
    if seen.scenario == NAIVE:
        if seen.charges >= 2:
            return "duplicate (expected: no proxy)", []
        return "no duplicate: proves nothing", [
            f"the naive client left {seen.charges} charge(s); without the double "
            "charge the demo shows nothing"
        ]
    problems: list[str] = []
    ledger = seen.ledger
    status = ledger.status if ledger else "no effect"
    ambiguous_unsafe = seen.mode == "unsafe" and seen.scenario in AMBIGUOUS
    if ambiguous_unsafe:
        if seen.charges > 1:
            problems.append(f"{seen.charges} charges: the proxy made a duplicate")
        if status != "outcome_unknown":
            problems.append(f"effect is {status}, expected a visible outcome_unknown")
        if any(result.outcome != "outcome_unknown" for result in seen.agents):
            problems.append("the agent was not told the outcome is unknown")
        verdict = f"no duplicate ({_charges(seen.charges)}), outcome_unknown shown"
    else:
        if seen.charges != 1:
            problems.append(f"{seen.charges} charges, expected exactly 1")
        if status != "succeeded" or ledger is None or ledger.receipt_source is None:
            problems.append(f"effect is {status}, expected succeeded with a receipt")
        if not all(result.final_2xx for result in seen.agents):
            problems.append("an agent did not get a 2xx answer")
        verdict = "exactly one charge"
    if seen.scenario in (failpoints.AFTER_RECEIPT_COMMIT, failpoints.IN_RECEIPT_BATCH):
        if not all(result.replayed for result in seen.agents):
            problems.append("the receipt committed before the crash was not replayed")
        verdict += ", receipt replayed"
    if seen.scenario == TOMBSTONE_RACE:
        proofs = ledger.absences_proven if ledger else 0
        if proofs < 1:
            problems.append("no tombstone proved the held attempt absent")
        if ledger is None or ledger.attempts < 2:
            problems.append("the next attempt was never sent")
        verdict += f", tombstone won ({proofs} absence proven)"
    if seen.scenario == COMMIT_RACE:
        if ledger is None or ledger.attempts != 1:
            sent = ledger.attempts if ledger else 0
            problems.append(f"{sent} attempts sent: the committed one was resent")
        if ledger is None or ledger.receipt_source != "lookup":
            problems.append("the receipt did not come from the kit's lookup")
        verdict += ", commit won, found by lookup"
    if seen.scenario == CONCURRENT:
        problems += _concurrent_problems(seen.agents)
        verdict += f", {len(seen.agents)} agents one answer"
    if seen.scenario == ZOMBIE:
        if not seen.fenced:
            problems.append("the frozen proxy's late write was not fenced")
        if not seen.taken_over:
            problems.append("the second proxy did not take the effect over")
        if not seen.second_proxy_kept_it:
            problems.append("the woken proxy wrote to the ledger after the takeover")
        verdict += f", zombie fenced ({seen.fenced or 0:g})"
    return verdict, problems


def _charges(n: int) -> str:
    return f"{n} charge" if n == 1 else f"{n} charges"


def _concurrent_problems(results: Sequence[AgentResult]) -> list[str]:
    problems = []
    bodies = {result.body for result in results}
    fresh = [result for result in results if not result.replayed]
    if len(bodies) != 1:
        problems.append(f"{len(bodies)} different answers to one intent")
    if len(fresh) > 1:
        problems.append(f"{len(fresh)} agents got a fresh (non-replayed) answer")
    return problems
