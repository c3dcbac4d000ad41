"""What every engine of a process shares; each engine adds its owner's name."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import timedelta

import aiohttp

from effect_broker.config.routes_config import RoutesConfig
from effect_broker.crypto import Keyring
from effect_broker.engine.ledger import Ledger
from effect_broker.engine.protocol import TargetProtocol
from effect_broker.engine.slots import UpstreamSlots
from effect_broker.engine.waiters import Waiters
from effect_broker.metrics import Metrics


@dataclass(frozen=True, slots=True)
class Wiring:
    """The ledger, the keys, the upstream client and the limits, built once."""

    config: RoutesConfig
    store: Ledger
    keyring: Keyring
    session: aiohttp.ClientSession
    injected: Mapping[str, Mapping[str, str]]  # route name -> resolved header values
    max_receipt_bytes: int
    metrics: Metrics
    lease_grace: timedelta
    slots: UpstreamSlots  # concurrent requests per route, and how long to queue
    reconciler_slots: UpstreamSlots  # the reconciler's own budget, apart from clients
    waiters: Waiters  # duplicates waiting for effects in flight, process-wide
    # route name -> how its target's answers are judged and its key placed (MCP);
    # routes not named here are plain HTTP.
    protocols: Mapping[str, TargetProtocol] = field(default_factory=dict)
