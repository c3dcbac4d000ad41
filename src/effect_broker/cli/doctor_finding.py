"""What one ``doctor`` check found: the shape every check module returns.

Its own module so that the checks (network, ledger, keys) can live apart from the
command that prints them without importing each other.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass

from effect_broker.errors import EffectBrokerError


@dataclass(frozen=True, slots=True)
class Finding:
    check: str
    ok: bool
    detail: str
    warning: bool = False


async def guarded(check: str, probe: Callable[[], Awaitable[Finding]]) -> Finding:
    try:
        return await probe()
    except EffectBrokerError as exc:
        return Finding(check, False, exc.message)
