"""A round's schedule, drawn from its seed: which operations, when, and which faults.

Pure: the same seed and options give the same operations and the same fault list, so a
failing round is replayed by its seed. What the seed cannot fix is the operating
system's timing (which request a SIGSTOP lands in, how long a restart takes), so a
replay repeats the schedule, not necessarily every interleaving.
"""

from __future__ import annotations

import random
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

KILL = "kill"  # SIGKILL a proxy, restart it on the same ports a moment later
PAUSE = "pause"  # SIGSTOP a proxy for less than a lease, then SIGCONT
LONG_PAUSE = "long-pause"  # SIGSTOP a proxy for longer than a lease and a settlement
SEND_PAUSE = "send-pause"  # a proxy freezes itself between attempt commit and send
# The ledger faults hit one proxy's relay, or every proxy's (``proxy`` None).
LEDGER_DELAY = "ledger-delay"  # every ledger reply late for a while
LEDGER_STALL = "ledger-stall"  # ledger replies held back, for less than a lease
LEDGER_LONG_STALL = "ledger-long-stall"  # ... for longer than a lease
LEDGER_DROP = "ledger-drop"  # every ledger connection cut, replies in flight lost
PG_RESTART = "pg-restart"  # PostgreSQL stopped (fast) and started (an owned server)
TARGET_WITHHOLD = "target-withhold"  # the target commits, then never answers
TARGET_FAIL = "target-fail"  # the target answers 503 without writing anything

FAULT_KINDS = (
    KILL,
    PAUSE,
    LONG_PAUSE,
    SEND_PAUSE,
    LEDGER_DELAY,
    LEDGER_STALL,
    LEDGER_LONG_STALL,
    LEDGER_DROP,
    PG_RESTART,
    TARGET_WITHHOLD,
    TARGET_FAIL,
)
#: Faults that keep a proxy from acting for longer than its lease and the route's
#: settlement bound: another proxy takes the effect over while the first still means to
#: send. The ones that find the zombie sender.
OUTLIVE_LEASE = frozenset({LONG_PAUSE, SEND_PAUSE, LEDGER_LONG_STALL})
WITHIN_LEASE = tuple(kind for kind in FAULT_KINDS if kind not in OUTLIVE_LEASE)

#: The demo target's four modes (the crash matrix's), reconcilable the most often: its
#: lookup is what a zombie sender fools.
MODE_WEIGHTS = {"reconcilable": 4, "idempotent": 2, "unsafe": 1, "transactional": 2}
MODES = tuple(MODE_WEIGHTS)
TWIN_SHARE = 0.1  # operations a second agent also asks for, with the same key
FAULT_EVERY = 1.0  # one fault per this many seconds of the window, on average
LONG = (5.0, 7.0)  # seconds a lease-outliving fault lasts: lease 1.8 s, bound 0.5 s,
# and a reconciler pass or two (1 s idle) for the takeover, probe and resend


@dataclass(frozen=True)
class Op:
    """One request an agent makes (and retries) at ``at`` seconds into the round."""

    key: str
    mode: str
    agent: int
    at: float
    amount: int


@dataclass(frozen=True)
class Fault:
    """One fault at ``at`` seconds: on ``proxy`` (if any), lasting ``seconds``;
    ``count`` is how many answers the target loses, the delay in milliseconds of a
    ``ledger-delay``, or which sends (every Nth) a ``send-pause`` freezes."""

    at: float
    kind: str
    proxy: int | None = None
    seconds: float = 0.0
    count: int = 0

    def describe(self) -> str:
        where = f" proxy {self.proxy}" if self.proxy is not None else ""
        if self.kind == SEND_PAUSE:
            return (
                f"{self.at:5.2f}s {self.kind}{where}: one send in {self.count} "
                f"frozen {self.seconds:.2f}s"
            )
        if self.kind == LEDGER_DELAY:
            return (
                f"{self.at:5.2f}s {self.kind}{where} +{self.count}ms {self.seconds:.2f}s"
            )
        if self.count:
            return f"{self.at:5.2f}s {self.kind}{where} x{self.count}"
        if self.seconds:
            return f"{self.at:5.2f}s {self.kind}{where} {self.seconds:.2f}s"
        return f"{self.at:5.2f}s {self.kind}{where}"


@dataclass(frozen=True)
class Schedule:
    seed: int
    proxies: int
    agents: int
    window: float
    kinds: tuple[str, ...]
    ops: tuple[Op, ...]
    faults: tuple[Fault, ...]

    @property
    def send_pause(self) -> Fault | None:
        """The proxy armed to freeze itself before sending (from the round's start)."""
        return next((f for f in self.faults if f.kind == SEND_PAUSE), None)

    @property
    def timed(self) -> tuple[Fault, ...]:
        """The faults applied at their time (all but the send pause, armed at start)."""
        return tuple(f for f in self.faults if f.kind != SEND_PAUSE)

    @property
    def keys(self) -> dict[str, str]:
        """Operation key -> mode, each key once (twins share one)."""
        return {op.key: op.mode for op in self.ops}

    def describe(self) -> list[str]:
        return [fault.describe() for fault in self.faults]


def make_schedule(
    seed: int,
    *,
    proxies: int,
    agents: int,
    ops: int,
    kinds: Iterable[str],
    window: float,
    modes: Sequence[str] = MODES,
) -> Schedule:
    """The round for ``seed``: ``ops`` operations spread over ``window`` seconds among
    ``agents``, and about one fault a second of the ``kinds`` given."""
    chosen = tuple(kind for kind in FAULT_KINDS if kind in set(kinds))
    unknown = set(kinds) - set(FAULT_KINDS)
    if unknown:
        raise ValueError(f"unknown fault kinds {sorted(unknown)}; known: {FAULT_KINDS}")
    if proxies < 1 or agents < 1 or ops < 1 or window <= 0:
        raise ValueError("proxies, agents, ops and window must be positive")
    rng = random.Random(seed)
    weights = [MODE_WEIGHTS.get(mode, 1) for mode in modes]
    planned: list[Op] = []
    for index in range(ops):
        key = f"s{seed}-{index:04d}"
        mode = rng.choices(modes, weights)[0]
        op = Op(key, mode, rng.randrange(agents), rng.uniform(0, window), 100 + index)
        planned.append(op)
        if agents > 1 and rng.random() < TWIN_SHARE:
            other = (op.agent + rng.randrange(1, agents)) % agents
            twin = Op(key, mode, other, op.at + rng.uniform(0, 1.0), op.amount)
            planned.append(twin)
    faults: list[Fault] = []
    timed = [kind for kind in chosen if kind != SEND_PAUSE]
    if SEND_PAUSE in chosen:
        faults.append(
            Fault(
                0.0,
                SEND_PAUSE,
                rng.randrange(proxies),
                rng.uniform(*LONG),
                rng.randint(3, 8),
            )
        )
    if timed:
        for _ in range(max(1, round(window / FAULT_EVERY))):
            faults.append(
                _fault(rng, rng.choice(timed), rng.uniform(0.3, window), proxies)
            )
    faults.sort(key=lambda fault: fault.at)
    return Schedule(
        seed,
        proxies,
        agents,
        window,
        chosen,
        tuple(sorted(planned, key=lambda op: op.at)),
        tuple(faults),
    )


def _fault(rng: random.Random, kind: str, at: float, proxies: int) -> Fault:
    proxy: int | None = rng.randrange(proxies)
    if kind.startswith("ledger-"):  # one proxy cut off from the ledger, or all of them
        ledger = rng.randrange(proxies + 1)
        proxy = ledger if ledger < proxies else None
    if kind == KILL:
        return Fault(at, kind, proxy, rng.uniform(0.2, 1.0))
    if kind == PAUSE:
        return Fault(at, kind, proxy, rng.uniform(0.1, 0.5))
    if kind == LONG_PAUSE:
        return Fault(at, kind, proxy, rng.uniform(*LONG))
    if kind == LEDGER_DELAY:
        return Fault(at, kind, proxy, rng.uniform(0.5, 2.0), rng.randint(20, 150))
    if kind == LEDGER_STALL:
        return Fault(at, kind, proxy, rng.uniform(0.1, 0.5))
    if kind == LEDGER_LONG_STALL:
        return Fault(at, kind, proxy, rng.uniform(*LONG))
    if kind == LEDGER_DROP:
        return Fault(at, kind, proxy)
    if kind == PG_RESTART:
        return Fault(at, kind, None, rng.uniform(0.2, 1.0))
    if kind in (TARGET_WITHHOLD, TARGET_FAIL):
        return Fault(at, kind, None, 0.0, rng.randint(1, 3))
    return Fault(at, kind)
