"""Which checks a contract gets, by its safety class."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import timedelta

import aiohttp

from effect_broker.config.contracts import Route
from effect_broker.conformance.idempotent import check_idempotent
from effect_broker.conformance.reconcilable import check_reconcilable
from effect_broker.conformance.sandbox import Sandbox
from effect_broker.conformance.transactional import check_transactional
from effect_broker.conformance.verdicts import (
    NO_CLAIMS,
    ClaimResult,
    Report,
    Verdict,
)
from effect_broker.engine.targets import well_known_origin
from effect_broker.models import SafetyClass


@dataclass(frozen=True, slots=True)
class VerifyOptions:
    #: How long the retention check may wait (None: it is not checked).
    retention_wait: timedelta | None = None


async def verify(route: Route, sandbox: Sandbox, options: VerifyOptions) -> Report:
    """Check every claim of ``route``'s contract against ``sandbox``."""
    contract = route.contract
    claims: list[ClaimResult]
    async with aiohttp.ClientSession() as session:
        if contract.safety is SafetyClass.IDEMPOTENT:
            claims = await check_idempotent(
                session, sandbox, contract, options.retention_wait
            )
        elif contract.safety is SafetyClass.RECONCILABLE:
            claims = await check_reconcilable(session, sandbox, contract)
        elif contract.safety is SafetyClass.TRANSACTIONAL:
            origin = well_known_origin(route, sandbox.url)
            claims = await check_transactional(session, sandbox, origin)
        else:
            claims = [
                ClaimResult(
                    NO_CLAIMS,
                    Verdict.HELD,
                    "an unsafe contract promises nothing the proxy relies on",
                )
            ]
    return Report(
        route=route.name,
        contract=contract.ref,
        safety=contract.safety.value,
        url=sandbox.url,
        claims=tuple(claims),
    )
