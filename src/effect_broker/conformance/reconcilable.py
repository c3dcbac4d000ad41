"""The claims of a reconcilable contract, checked with the proxy's own probe.

The probe is ``engine.probe.run_probe``, the code the proxy and reconciler run, so a
verdict here is what the proxy would conclude. A committed effect must be found by the
time ``settlement_bound`` has passed since its answer (absence before that proves
nothing, which is why the proxy waits for the bound); a key never sent must never be
found. Whether the probe says "unknown" when the target cannot tell needs the target to
fail on purpose, which a sandbox cannot be made to do from here.
"""

from __future__ import annotations

import asyncio
import time
from datetime import timedelta

import aiohttp

from effect_broker.config.contracts import Contract, Probe
from effect_broker.config.durations import format_duration
from effect_broker.conformance.sandbox import Sandbox
from effect_broker.conformance.verdicts import (
    PROBE_ABSENT_FOR_UNSENT,
    PROBE_FINDS_COMMITTED,
    PROBE_UNKNOWN,
    ClaimResult,
    Verdict,
)
from effect_broker.engine.probe import ProbeResult, ProbeVerdict, run_probe

POLL = 0.05  # seconds between looks while the bound runs
MAX_PROBE_BODY = 1 << 20


async def _probe(
    session: aiohttp.ClientSession, sandbox: Sandbox, probe: Probe, key: str
) -> ProbeResult:
    return await run_probe(
        session,
        probe,
        base_url=sandbox.probe_base,
        downstream_key=key,
        headers=list(sandbox.headers.items()),
        timeout=timedelta(seconds=sandbox.timeout),
        max_body=MAX_PROBE_BODY,
    )


async def check_reconcilable(
    session: aiohttp.ClientSession, sandbox: Sandbox, contract: Contract
) -> list[ClaimResult]:
    probe, bound = contract.probe, contract.settlement_bound
    assert probe is not None and bound is not None  # the loader's invariants
    return [
        await _finds_committed(session, sandbox, contract, probe, bound),
        await _never_finds_unsent(session, sandbox, probe, bound),
        ClaimResult(
            PROBE_UNKNOWN,
            Verdict.NOT_CHECKABLE,
            "needs the target to fail on purpose; the proxy itself treats every "
            "status the contract does not list as unknown",
        ),
    ]


async def _finds_committed(
    session: aiohttp.ClientSession,
    sandbox: Sandbox,
    contract: Contract,
    probe: Probe,
    bound: timedelta,
) -> ClaimResult:
    key = sandbox.fresh_key("recon")
    answer = await sandbox.send(session, contract.correlation_header, key)
    if not answer.ok:
        return ClaimResult(
            PROBE_FINDS_COMMITTED,
            Verdict.NOT_CHECKABLE,
            f"the request was answered {answer.brief()}: fix the sample request",
        )
    deadline = answer.at + bound.total_seconds()
    shown = format_duration(bound)
    while True:
        looked_at = time.monotonic()
        result = await _probe(session, sandbox, probe, key)
        if result.verdict is ProbeVerdict.FOUND:
            after = looked_at - answer.at
            return ClaimResult(
                PROBE_FINDS_COMMITTED,
                Verdict.HELD,
                f"found {result.external_id or 'it'} {after:.2f}s after the answer "
                f"(bound {shown})",
            )
        if looked_at >= deadline:
            break
        await asyncio.sleep(min(POLL, max(0.0, deadline - time.monotonic())))
    if result.verdict is ProbeVerdict.UNKNOWN:
        return ClaimResult(
            PROBE_FINDS_COMMITTED,
            Verdict.NOT_CHECKABLE,
            f"the probe could not tell ({result.detail}) once {shown} had passed",
        )
    return ClaimResult(
        PROBE_FINDS_COMMITTED,
        Verdict.BROKEN,
        f"still absent {shown} after the target answered: the lookup lags past "
        "settlement_bound, so the proxy would send the effect again",
    )


async def _never_finds_unsent(
    session: aiohttp.ClientSession, sandbox: Sandbox, probe: Probe, bound: timedelta
) -> ClaimResult:
    key = sandbox.fresh_key("unsent")
    result = await _probe(session, sandbox, probe, key)
    if result.verdict is ProbeVerdict.FOUND:
        return ClaimResult(
            PROBE_ABSENT_FOR_UNSENT,
            Verdict.BROKEN,
            f"the probe found {result.external_id or 'an effect'} for a key never sent",
        )
    if result.verdict is ProbeVerdict.UNKNOWN:
        return ClaimResult(
            PROBE_ABSENT_FOR_UNSENT,
            Verdict.HELD,
            f"answered unknown ({result.detail}): safe, but a lost answer would then "
            "wait for a person",
        )
    return ClaimResult(
        PROBE_ABSENT_FOR_UNSENT,
        Verdict.HELD,
        "absent, as it should be (the proxy trusts an absence only after "
        f"{format_duration(bound)})",
    )
