"""One log line per cause per interval, with a count of the lines it held back.

During a database outage every request fails the same way; a line per request buries the
one line an operator needs and can fill a disk. ``RateLimitedLog`` lets the first line of
a cause through, then counts repeats until the interval has passed, and says how many it
suppressed on the next line it lets through.
"""

from __future__ import annotations

import logging
import time
from collections import OrderedDict
from collections.abc import Callable


class RateLimitedLog:
    """Log through ``logger`` at most once per ``interval`` seconds for each cause.

    A cause must be something the client cannot multiply (a reason, a route), never a
    host or a header it writes; and the state is bounded anyway: past ``max_causes``
    the cause seen least recently is forgotten (its next line then comes through).
    """

    def __init__(
        self,
        logger: logging.Logger,
        interval: float = 10.0,
        clock: Callable[[], float] = time.monotonic,
        max_causes: int = 256,
    ) -> None:
        self._logger = logger
        self._interval = interval
        self._clock = clock
        self._max_causes = max_causes
        # cause -> [when its next line may be written, lines suppressed since the last]
        self._causes: OrderedDict[str, list[float]] = OrderedDict()

    def __len__(self) -> int:
        """How many causes are remembered."""
        return len(self._causes)

    def log(
        self,
        level: int,
        cause: str,
        message: str,
        *args: object,
        exc_info: BaseException | None = None,
    ) -> bool:
        """Log ``message % args`` unless ``cause`` was logged within the interval.

        ``cause`` names the kind of failure (not the instance), e.g. ``"store"``.
        Returns whether a line was written.
        """
        now = self._clock()
        state = self._causes.get(cause)
        if state is not None:
            self._causes.move_to_end(cause)
            if now < state[0]:
                state[1] += 1
                return False
            held = int(state[1])
            state[:] = [now + self._interval, 0]
        else:
            held = 0
            self._causes[cause] = [now + self._interval, 0]
            if len(self._causes) > self._max_causes:
                self._causes.popitem(last=False)
        if held:
            message += " (%d similar lines suppressed in the last %.0f s)"
            args = (*args, held, self._interval)
        self._logger.log(level, message, *args, exc_info=exc_info)
        return True

    def error(
        self,
        cause: str,
        message: str,
        *args: object,
        exc_info: BaseException | None = None,
    ) -> bool:
        return self.log(logging.ERROR, cause, message, *args, exc_info=exc_info)

    def warning(self, cause: str, message: str, *args: object) -> bool:
        return self.log(logging.WARNING, cause, message, *args)


class lazy:
    """A log argument computed only if its line is written: ``%s`` calls ``make``. A
    line held back costs nothing, however dear the value (a URL rebuilt, say)."""

    __slots__ = ("_make",)

    def __init__(self, make: Callable[[], object]) -> None:
        self._make = make

    def __str__(self) -> str:
        return str(self._make())
