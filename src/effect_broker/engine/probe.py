"""Ask a reconcilable target what happened, by the correlation key we sent it.

Only the statuses the contract lists are conclusive. A timeout, a 5xx, an unlisted
status, or a "found" body without the promised id all mean "unknown": the effect stays
unknown, and nothing is sent again on the strength of a guess.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, replace
from datetime import timedelta
from enum import StrEnum
from typing import Any

import aiohttp

from effect_broker.config.contracts import Probe
from effect_broker.engine.messages import StoredResponse
from effect_broker.engine.upstream import Delivery, send
from effect_broker.headers import Headers


class ProbeVerdict(StrEnum):
    FOUND = "found"
    ABSENT = "absent"
    UNKNOWN = "unknown"


@dataclass(frozen=True, slots=True)
class ProbeResult:
    verdict: ProbeVerdict
    response: StoredResponse | None = None
    external_id: str | None = None
    detail: str = ""
    elapsed: float = 0.0


def resolve_pointer(document: Any, pointer: str) -> Any:
    """RFC 6901 JSON pointer lookup; ``KeyError`` when the path does not exist."""
    if pointer == "":
        return document
    if not pointer.startswith("/"):
        raise KeyError(pointer)
    current = document
    for token in pointer[1:].split("/"):
        token = token.replace("~1", "/").replace("~0", "~")
        if isinstance(current, dict) and token in current:
            current = current[token]
        elif isinstance(current, list) and token.isdigit() and int(token) < len(current):
            current = current[int(token)]
        else:
            raise KeyError(pointer)
    return current


def judge(probe: Probe, response: StoredResponse) -> ProbeResult:
    """What one probe answer proves (pure)."""
    if response.status in probe.absent_statuses:
        return ProbeResult(ProbeVerdict.ABSENT, response)
    if response.status not in probe.found_statuses:
        return ProbeResult(
            ProbeVerdict.UNKNOWN, response, detail=f"probe answered {response.status}"
        )
    if probe.external_id is None:
        return ProbeResult(ProbeVerdict.FOUND, response)
    try:
        external_id = resolve_pointer(json.loads(response.body), probe.external_id)
    except (ValueError, KeyError):
        return ProbeResult(
            ProbeVerdict.UNKNOWN,
            response,
            detail=f"probe body has no {probe.external_id}: not proof of a commit",
        )
    return ProbeResult(ProbeVerdict.FOUND, response, external_id=str(external_id))


async def run_probe(
    session: aiohttp.ClientSession,
    probe: Probe,
    *,
    base_url: str,
    downstream_key: str,
    headers: Headers,
    timeout: timedelta,
    max_body: int,
) -> ProbeResult:
    # The probe path is relative to the route's upstream, base path included.
    url = base_url.rstrip("/") + probe.path_for(downstream_key)
    attempt = await send(
        session,
        method=probe.method,
        url=url,
        headers=headers,
        body=b"",
        timeout=timeout,
        max_body=max_body,
    )
    attempt.release()
    if attempt.delivery is not Delivery.ANSWERED or attempt.response is None:
        result = ProbeResult(ProbeVerdict.UNKNOWN, detail=attempt.detail)
    elif attempt.overflow is not None:
        result = ProbeResult(ProbeVerdict.UNKNOWN, detail="probe answer too large")
    else:
        result = judge(probe, attempt.response)
    return replace(result, elapsed=attempt.elapsed)
