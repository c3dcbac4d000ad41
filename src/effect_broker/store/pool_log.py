"""asyncpg's pool in a ledger outage: one line per interval, not a traceback per try.

When the database goes away, asyncpg's pool keeps trying to restore its minimum size and
logs every failed try at WARNING with the full traceback (about 30 lines) on the
``asyncpg.pool`` logger. An operator needs the cause once and a count, so this filter
drops those records and says instead, at most once per interval: the pool cannot
reconnect, and why, in one line. The traceback goes to DEBUG, for whoever asks for it.
"""

from __future__ import annotations

import logging

from effect_broker.ratelimited_log import RateLimitedLog

POOL_LOGGER = "asyncpg.pool"
RECONNECT_FAILED = "Failed to restore the pool connection floor"

log = logging.getLogger("effect_broker.store")


def one_line(exc: BaseException | None) -> str:
    """An exception as one line: its type and the first line of its message."""
    if exc is None:
        return "no cause given"
    text = str(exc).strip().splitlines()
    return f"{type(exc).__name__}: {text[0]}" if text else type(exc).__name__


class PoolReconnectFilter(logging.Filter):
    """Turns asyncpg's failed-reconnect tracebacks into one rate-limited line."""

    def __init__(self, limiter: RateLimitedLog | None = None) -> None:
        super().__init__()
        self.limiter = limiter or RateLimitedLog(log)

    def filter(self, record: logging.LogRecord) -> bool:
        if not str(record.msg).startswith(RECONNECT_FAILED):
            return True
        exc = record.exc_info[1] if record.exc_info else None
        log.debug("the ledger pool failed to reconnect", exc_info=record.exc_info)
        self.limiter.warning(
            "pool-reconnect",
            "the ledger database is unreachable; the connection pool keeps "
            "reconnecting: %s",
            one_line(exc),
        )
        return False


def quiet_pool_reconnects() -> None:
    """Install ``PoolReconnectFilter`` on asyncpg's pool logger, once per process."""
    pool_log = logging.getLogger(POOL_LOGGER)
    if not any(isinstance(f, PoolReconnectFilter) for f in pool_log.filters):
        pool_log.addFilter(PoolReconnectFilter())
