"""The fault explorer on fixed seeds: many agents, two proxies on one ledger, faults that
overlap, and the target's own table as the oracle.

``test_faults_within_a_lease_break_no_promise`` runs every fault that keeps a proxy
away for less than its lease (kills, short pauses, late, stalled and cut ledger
replies, a PostgreSQL restart, lost target answers) on a PostgreSQL of its own.
``test_the_zombie_sender_sends_nothing`` freezes a proxy exactly between its attempt's
commit and its send, past the lease: a second proxy takes over, probes, finds nothing
and sends, and the first one, thawed, finds its send window closed and sends nothing.
Before the send fence this round found two charges for one key every time.
``test_every_fault_breaks_no_promise`` adds the faults that outlive a lease.
"""

from __future__ import annotations

import re
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest
from typer.testing import CliRunner

from effect_broker.cli.demo import demo_app
from effect_broker.demo import explorer

pytestmark = pytest.mark.postgres

SEEDS = 3  # rounds, seeds 2026, 2027, 2028
OPS = 100  # operations a round: 300 in all
ZOMBIE_SEED = 2


@pytest.fixture
def own_postgres() -> Iterator[explorer.OwnedPostgres]:
    """A server of this test's own, which the explorer may restart. Not under pytest's
    base directory: a concurrent pytest run resets that to 0700, and the server runs
    as another user when the tests run as root."""
    home = Path(tempfile.mkdtemp(prefix="eb-explore-pg-"))
    home.chmod(0o755)
    postgres = explorer.OwnedPostgres(home / "data")
    try:
        yield postgres
    finally:
        postgres.cleanup()
        shutil.rmtree(home, ignore_errors=True)


def test_faults_within_a_lease_break_no_promise(
    own_postgres: explorer.OwnedPostgres, tmp_path: Path
) -> None:
    server = own_postgres.start()
    result = explorer.explore(
        server,
        tmp_path,
        explorer.schedules(
            2026, proxies=2, agents=8, kinds=explorer.WITHIN_LEASE, ops=OPS
        ),
        minutes=None,
        rounds=SEEDS,
        postgres=own_postgres,
        progress=print,
    )
    assert [r.error for r in result.rounds] == [None] * SEEDS
    failures = {r.schedule.seed: r.verdict.violations for r in result.failed}
    assert failures == {}
    # The faults really happened, and the agents really had to retry through them.
    applied = "\n".join(line for r in result.rounds for line in r.applied)
    for happened in ("SIGKILLed", "SIGSTOPped", "PostgreSQL stopped", "ledger"):
        assert happened in applied
    assert sum(len(r.schedule.keys) for r in result.rounds) == SEEDS * OPS
    stats = [r.verdict.stats for r in result.rounds]
    assert sum(s["requests"] for s in stats) > SEEDS * OPS
    assert sum(s["2xx"] for s in stats) > SEEDS * OPS // 2


def zombie_schedule(n: int) -> explorer.Schedule:
    """Reconcilable only, and only the send pause: the first proxy freezes itself at
    every fourth send, for longer than the lease and the settlement bound."""
    return explorer.make_schedule(
        ZOMBIE_SEED + n,
        proxies=2,
        agents=8,
        ops=30,
        kinds=(explorer.SEND_PAUSE,),
        window=4.0,
        modes=("reconcilable",),
    )


def test_the_zombie_sender_sends_nothing(server_dsn: str, tmp_path: Path) -> None:
    result = explorer.explore(
        server_dsn,
        tmp_path,
        zombie_schedule,
        minutes=None,
        rounds=1,
        postgres=None,
        progress=print,
    )
    (only,) = result.rounds
    if only.error is not None:
        pytest.fail(f"the round did not run: {only.error}")  # not the expected failure
    if not any("froze itself before a send" in line for line in only.applied):
        pytest.fail("the armed proxy never froze itself: nothing was explored")
    assert only.verdict.violations == []


def test_every_fault_breaks_no_promise(
    own_postgres: explorer.OwnedPostgres, tmp_path: Path
) -> None:
    """Every kind, the lease-outliving ones too (a pause or a ledger stall past the
    lease, a send pause), on fixed seeds."""
    server = own_postgres.start()
    result = explorer.explore(
        server,
        tmp_path,
        explorer.schedules(
            4242, proxies=2, agents=8, kinds=explorer.FAULT_KINDS, ops=OPS
        ),
        minutes=None,
        rounds=1,
        postgres=own_postgres,
        progress=print,
    )
    assert [r.error for r in result.rounds] == [None]
    assert {r.schedule.seed: r.verdict.violations for r in result.failed} == {}


def test_the_command_prints_a_line_a_round(server_dsn: str, tmp_path: Path) -> None:
    argv = ["explore", "--seed", "77", "--rounds", "1", "--ops", "20", "--within-lease"]
    argv += ["--database-url", server_dsn, "--workdir", str(tmp_path)]
    result = CliRunner().invoke(demo_app, argv)
    assert result.exit_code == 0, result.output
    assert "pg-restart" not in result.output.splitlines()[0]  # never a given server
    assert re.search(r"^seed 77: 20 ops, \d+ faults \(.*\), ok in", result.output, re.M)
    assert "1 rounds, 20 operations" in result.output
    assert "no violation" in result.output


def test_the_command_refuses_an_unknown_fault_kind() -> None:
    result = CliRunner().invoke(demo_app, ["explore", "--fault", "meteor"])
    assert result.exit_code == 2
    assert "'meteor' is not one of" in result.output
