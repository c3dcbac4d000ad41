"""One log line per cause per interval, with a count of the lines it held back.

During a database outage every request fails the same way; a line per request buries the
one line an operator needs and can fill a disk. ``RateLimitedLog`` lets the first line of
a cause through, then counts repeats until the interval has passed, and says how many it
suppressed on the next line it lets through.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable


class RateLimitedLog:
    """Log through ``logger`` at most once per ``interval`` seconds for each cause."""

    def __init__(
        self,
        logger: logging.Logger,
        interval: float = 10.0,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._logger = logger
        self._interval = interval
        self._clock = clock
        self._next: dict[str, float] = {}
        self._suppressed: dict[str, int] = {}

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
        if now < self._next.get(cause, float("-inf")):
            self._suppressed[cause] = self._suppressed.get(cause, 0) + 1
            return False
        self._next[cause] = now + self._interval
        held = self._suppressed.pop(cause, 0)
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
