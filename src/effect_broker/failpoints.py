"""Named crash points for the proof: the process dies (or freezes) here, on purpose.

Armed only by ``EFFECT_BROKER_FAILPOINTS`` (comma-separated entries, read once at
import), so production code pays one dict lookup per point. An entry is a point's name,
optionally followed by what to do there:

``before_upstream_send`` or ``before_upstream_send:exit``
    ``os._exit`` at every hit: it skips every cleanup handler, like SIGKILL or a power
    cut would, so nothing gets to "finish up".
``before_upstream_send:stop``
    The process sends itself SIGSTOP and sits frozen, every socket and lease as it was,
    until someone sends SIGCONT; then it carries on as if nothing happened. That is a
    long GC pause or a suspended VM at the one point that matters (between the
    attempt's commit and its send), which a signal from outside can only hit by luck.
``...:every=N`` / ``...:p=0.25``
    Only every Nth hit of the point (the Nth, 2Nth, ...) acts, or each hit with that
    probability; the other hits pass. ``before_upstream_send:stop:every=5`` freezes one
    request in five.
"""

from __future__ import annotations

import os
import random
import signal
import sys
from collections.abc import Mapping
from dataclasses import dataclass, field

BEFORE_RESERVE_COMMIT = "before_reserve_commit"
AFTER_RESERVE = "after_reserve"
BEFORE_UPSTREAM_SEND = "before_upstream_send"
AFTER_UPSTREAM_RESPONSE = "after_upstream_response"
AFTER_RECEIPT_COMMIT = "after_receipt_commit"
# Inside a group commit: the batch's statement committed, none of its requests answered.
IN_RESERVE_BATCH = "in_reserve_batch"
IN_RECEIPT_BATCH = "in_receipt_batch"

ALL = (
    BEFORE_RESERVE_COMMIT,
    AFTER_RESERVE,
    BEFORE_UPSTREAM_SEND,
    AFTER_UPSTREAM_RESPONSE,
    AFTER_RECEIPT_COMMIT,
    IN_RESERVE_BATCH,
    IN_RECEIPT_BATCH,
)
EXIT_CODE = 86

EXIT = "exit"
STOP = "stop"
ACTIONS = (EXIT, STOP)


@dataclass
class Arming:
    """What one armed point does, and on which of its hits."""

    action: str = EXIT
    every: int = 1
    probability: float = 1.0
    hits: int = field(default=0, compare=False)

    def describe(self, name: str) -> str:
        """The entry as it would be written: ``name:stop:every=5``."""
        words = [name, self.action]
        if self.every > 1:
            words.append(f"every={self.every}")
        if self.probability < 1.0:
            words.append(f"p={self.probability:g}")
        return ":".join(words)

    def fires(self, rng: random.Random) -> bool:
        """Count this hit; whether it is one that acts."""
        self.hits += 1
        if self.hits % self.every:
            return False
        return self.probability >= 1.0 or rng.random() < self.probability


def parse(raw: str) -> dict[str, Arming]:
    """``EFFECT_BROKER_FAILPOINTS``'s value as armings by point name.

    Raises ``ValueError`` with a message naming the entry that cannot be read.
    """
    armed: dict[str, Arming] = {}
    for entry in (part.strip() for part in raw.split(",")):
        if not entry:
            continue
        name, *options = (word.strip() for word in entry.split(":"))
        if name not in ALL:
            raise ValueError(
                f"EFFECT_BROKER_FAILPOINTS names unknown failpoints [{name!r}]; "
                f"known: {', '.join(ALL)}"
            )
        arming = Arming()
        for option in options:
            _apply(arming, option, entry)
        armed[name] = arming
    return armed


def _apply(arming: Arming, option: str, entry: str) -> None:
    if option in ACTIONS:
        arming.action = option
        return
    key, _, value = option.partition("=")
    try:
        if key == "every" and int(value) >= 1:
            arming.every = int(value)
            return
        if key == "p" and 0.0 < float(value) <= 1.0:
            arming.probability = float(value)
            return
    except ValueError:
        pass
    raise ValueError(
        f"EFFECT_BROKER_FAILPOINTS entry {entry!r}: cannot read {option!r}; expected "
        f"an action ({', '.join(ACTIONS)}), every=N (N >= 1) or p=P (0 < P <= 1)"
    )


def _armed_from_environment() -> dict[str, Arming]:
    try:
        return parse(os.environ.get("EFFECT_BROKER_FAILPOINTS", ""))
    except ValueError as exc:
        raise SystemExit(str(exc)) from None


PLANS: Mapping[str, Arming] = _armed_from_environment()
ARMED = frozenset(PLANS)
_rng = random.Random()


def hit(name: str) -> None:
    """Die (or freeze) here if this failpoint is armed and this hit acts on it."""
    arming = PLANS.get(name)
    if arming is None or not arming.fires(_rng):
        return
    if arming.action == STOP:
        print(
            f"effect-broker: failpoint {name} hit, stopping (SIGSTOP)",
            file=sys.stderr,
            flush=True,
        )
        os.kill(os.getpid(), signal.SIGSTOP)
        print(f"effect-broker: failpoint {name}: resumed", file=sys.stderr, flush=True)
        return
    print(f"effect-broker: failpoint {name} hit, exiting", file=sys.stderr, flush=True)
    os._exit(EXIT_CODE)
