"""The send fence: an attempt's first byte leaves only while its lease surely holds.

The ledger stamps a lease as ``now() + lease`` on the database's clock. A sender that
commits its attempt and is then paused (a stopped process, a long GC, a ledger reply
delayed on the wire) may wake after another worker has taken the effect over, probed the
target, found nothing and sent its own attempt: if the sleeper then sends too, the
target sees the effect twice. Fencing the database writes by version does not stop
that, because the duplicate is a send, not a write.

So every attempt carries a ``SendWindow`` measured on the sender's own monotonic clock
from *before* it asked for the lease: the database cannot have stamped the lease earlier
than that moment, so the lease cannot end before ``asked_at + lease``. The window closes
``grace`` before that bound, and the connection refuses its first write once the window
has closed. Nothing compares the proxy's clock with the database's; the one assumption
left is that the sender is not paused for longer than ``grace`` between the check and
the socket write that immediately follows it (and that both clocks run at the same
rate, which NTP slews, never steps, for a monotonic clock).

Pure logic: this module reads only the monotonic clock.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from contextvars import ContextVar
from datetime import timedelta
from enum import StrEnum


class WindowState(StrEnum):
    UNCHECKED = "unchecked"  # no byte of the attempt has been offered to the socket
    OPEN = "open"  # the first byte went out inside the window; the rest may follow
    WITHHELD = "withheld"  # the window had closed: nothing was written, nothing will be


class SendWindow:
    """Until when, on this process's monotonic clock, an attempt may start sending.

    ``admit`` decides once, at the attempt's first write: after a yes every later
    write of the same attempt goes out (a request cut in half proves nothing), after
    a no none does.
    """

    __slots__ = ("_clock", "closes_at", "lease", "state")

    def __init__(
        self,
        asked_at: float,
        lease: timedelta,
        grace: timedelta,
        *,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.lease = lease
        self.closes_at = asked_at + (lease - grace).total_seconds()
        self.state = WindowState.UNCHECKED
        self._clock = clock

    @classmethod
    def asking_now(
        cls,
        lease: timedelta,
        grace: timedelta,
        *,
        clock: Callable[[], float] = time.monotonic,
    ) -> SendWindow:
        """A window for a lease about to be asked for: take it *before* the request."""
        return cls(clock(), lease, grace, clock=clock)

    def admit(self) -> bool:
        """May the next byte go out? Decided at the first call, kept after."""
        if self.state is WindowState.UNCHECKED:
            self.state = (
                WindowState.OPEN
                if self._clock() < self.closes_at
                else WindowState.WITHHELD
            )
        return self.state is WindowState.OPEN

    @property
    def withheld(self) -> bool:
        return self.state is WindowState.WITHHELD

    def late_by(self) -> float:
        """Seconds past the window's close, now (0 while it is open)."""
        return max(0.0, self._clock() - self.closes_at)


# The attempt being sent by the current task (and the tasks it starts, such as
# aiohttp's body writer): the connection consults it at every write.
current_window: ContextVar[SendWindow | None] = ContextVar(
    "effect_broker_send_window", default=None
)
