"""What the admin API needs from the running process, and nothing of the proxy's."""

from __future__ import annotations

from dataclasses import dataclass

from aiohttp import web

from effect_broker.crypto import Keyring
from effect_broker.engine.engine import Engine
from effect_broker.engine.ledger import LedgerReader
from effect_broker.metrics import Metrics
from effect_broker.tenancy import TenantResolver


@dataclass(frozen=True, slots=True)
class AdminState:
    store: LedgerReader  # reads: lists, inspections, receipts, readiness
    keyring: Keyring  # receipts are decrypted for their own tenant only
    engine: Engine  # every change: reconcile now, resolve
    metrics: Metrics
    tenant: str  # the sidecar's tenant; unused in gateway mode
    gateway: TenantResolver | None  # set in gateway mode: tenant per API key


ADMIN_STATE = web.AppKey("admin_state", AdminState)
