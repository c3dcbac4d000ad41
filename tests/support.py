"""Helpers shared by test modules (fixtures live in conftest.py).

A test module never imports from another test module: a helper two modules need lives
here or in a ``*_support.py`` module beside them.
"""

from __future__ import annotations

import asyncio
import inspect
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]


async def poll(
    look: Callable[[], Any],
    *,
    within: float = 10.0,
    every: float = 0.02,
    what: str | Callable[[], str] = "the condition",
) -> Any:
    """Call ``look`` (plain or async) until it gives something other than None or
    False, and return that; fail once ``within`` seconds have passed.

    The one way the tests wait for something to happen: a deadline, never a sleep that
    hopes to be long enough. ``what`` names what was awaited in the failure (a callable
    is asked only then, so it can describe the state the test gave up in).
    """
    deadline = time.monotonic() + within
    while True:
        found = look()
        if inspect.isawaitable(found):
            found = await found
        if found is not None and found is not False:
            return found
        if time.monotonic() >= deadline:
            awaited = what() if callable(what) else what
            raise AssertionError(f"timed out after {within:g} s waiting for {awaited}")
        await asyncio.sleep(every)


def unused_pid() -> int:
    """A pid no process can have (one past the kernel's largest), for a "dead" process
    without starting one: unit tests start no processes."""
    try:
        return int(Path("/proc/sys/kernel/pid_max").read_text()) + 1
    except (OSError, ValueError):
        return 2**22 + 1  # above the largest pid Linux and macOS hand out
