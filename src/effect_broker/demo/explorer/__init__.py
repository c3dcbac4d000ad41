"""The fault explorer: random schedules of faults against many agents and several proxies.

The crash matrix breaks one thing at a time at points chosen by hand; the explorer
draws its faults from a seed and lets them overlap. A round starts a fresh ledger
database and the demo payment target, two or more ``effect-broker serve`` processes on
that one ledger (each reaching PostgreSQL through a relay of its own that can make
replies late),
and many agents that send charges with operation keys and retry like real agents (same
key after a timeout, a 5xx or a 409). While they work, the seed's faults happen:

* ``kill``: a proxy gets SIGKILL and is restarted on its ports a moment later;
* ``pause`` / ``long-pause``: a proxy is frozen (SIGSTOP) for less than a lease, or for
  longer than a lease and the route's settlement bound, then thawed (SIGCONT);
* ``send-pause``: one proxy is started with
  ``EFFECT_BROKER_FAILPOINTS=before_upstream_send:stop:every=N``, so every Nth request
  it sends freezes it exactly between the attempt's commit and the send; the explorer
  holds it frozen past the lease, then lets it go on;
* ``ledger-delay`` / ``ledger-stall`` / ``ledger-long-stall`` / ``ledger-drop``: one
  proxy's relay (or every proxy's) makes ledger replies late, holds them back, or cuts
  every connection;
* ``pg-restart``: PostgreSQL is stopped and started again (only a server the run
  started itself, never one given by ``--database-url``);
* ``target-withhold`` / ``target-fail``: the target commits and never answers, or
  answers 503 without writing.

After the round the faults are undone, the reconcilers bring the ledger to rest, every
process stops, and the oracle (``oracle``) compares every operation key with the
target's own table: at most one execution per key; a 2xx claims an execution and names
it; a replay equals the first answer; unsafe unknowns are reported. The faults in
``schedule.OUTLIVE_LEASE`` are the ones that let a second proxy take an effect over
while the first still means to send.

The schedule (operations, their times, the faults and their times) is a function of the
seed alone; the operating system's timing is not, so a replay of a seed repeats the
schedule, not necessarily every interleaving.

The code is split by job: ``schedule`` (the seed's plan, pure), ``oracle`` (the rules,
pure), ``relay`` (the ledger relay), ``postgres`` (a server of the run's own),
``cluster`` (the processes), ``agents``, ``faults`` (carrying the plan out) and
``rounds`` (a round from start to verdict, and the loop of rounds).
"""

from collections.abc import Callable, Iterable

from effect_broker.demo.explorer.oracle import (
    Answer,
    Execution,
    LedgerRow,
    Verdict,
    judge,
)
from effect_broker.demo.explorer.postgres import OwnedPostgres
from effect_broker.demo.explorer.rounds import Exploration, RoundResult, explore
from effect_broker.demo.explorer.schedule import (
    FAULT_KINDS,
    OUTLIVE_LEASE,
    PG_RESTART,
    SEND_PAUSE,
    WITHIN_LEASE,
    Fault,
    Op,
    Schedule,
    make_schedule,
)

DEFAULT_OPS = 60  # operations per round
DEFAULT_WINDOW = 8.0  # seconds over which a round's operations and faults are spread


def schedules(
    seed: int,
    *,
    proxies: int,
    agents: int,
    kinds: Iterable[str],
    ops: int = DEFAULT_OPS,
    window: float = DEFAULT_WINDOW,
) -> Callable[[int], Schedule]:
    """Round n's schedule is seed + n's: a failing round replays with ``--seed`` set
    to its own seed and ``--rounds 1``."""
    chosen = tuple(kinds)

    def nth(n: int) -> Schedule:
        return make_schedule(
            seed + n, proxies=proxies, agents=agents, ops=ops, kinds=chosen, window=window
        )

    return nth


__all__ = [
    "DEFAULT_OPS",
    "DEFAULT_WINDOW",
    "FAULT_KINDS",
    "OUTLIVE_LEASE",
    "PG_RESTART",
    "SEND_PAUSE",
    "WITHIN_LEASE",
    "Answer",
    "Execution",
    "Exploration",
    "Fault",
    "LedgerRow",
    "Op",
    "OwnedPostgres",
    "RoundResult",
    "Schedule",
    "Verdict",
    "explore",
    "judge",
    "make_schedule",
    "schedules",
]
