"""The lookup and tombstone endpoints, apart from any web framework or driver.

``Endpoints.handle`` takes the three things that decide an answer (method, path, the
presented secret) and returns a ``Reply``; the aiohttp and ASGI adapters only translate.
So both frameworks authenticate, validate and answer identically, and the rules can be
tested without a server.
"""

from __future__ import annotations

import hmac
import json
import logging
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Protocol

from effect_broker.target.outcomes import (
    AttemptInProgress,
    KitNotInstalled,
    TombstoneResult,
    in_progress_answer,
    problem,
)
from effect_broker.target.protocol import (
    SECRET_HEADER,
    TOMBSTONE_SUFFIX,
    WELL_KNOWN_PREFIX,
    AttemptReport,
    AttemptState,
    StoredAnswer,
    is_attempt_key,
)

log = logging.getLogger("effect_broker.target")


class Backend(Protocol):
    """The kit's table behind the endpoints: one short connection per call."""

    async def lookup(self, attempt_key: str) -> AttemptReport: ...

    async def tombstone(self, attempt_key: str) -> TombstoneResult: ...

    async def check_installed(self) -> None: ...


@dataclass(frozen=True, slots=True)
class Reply:
    status: int
    headers: Mapping[str, str] = field(default_factory=dict)
    body: bytes = b""


def owns(path: str) -> bool:
    """Whether ``path`` is the kit's to answer: anything under the prefix."""
    return path.startswith(WELL_KNOWN_PREFIX)


def _reply(answer: StoredAnswer, **extra: str) -> Reply:
    return Reply(answer.status, {**answer.headers, **extra}, answer.body)


def _report(status: int, report: AttemptReport) -> Reply:
    return Reply(
        status,
        {"Content-Type": "application/json", "Cache-Control": "no-store"},
        json.dumps(report.to_json()).encode(),
    )


UNAUTHORIZED = _reply(
    problem(
        401,
        "target-secret",
        "Missing or wrong shared secret",
        f"the kit's endpoints need the shared secret in {SECRET_HEADER}",
    )
)


class Endpoints:
    """Serve ``GET {prefix}{key}`` (lookup) and ``PUT {prefix}{key}/tombstone``."""

    def __init__(self, backend: Backend, secret: str) -> None:
        if not secret:
            raise ValueError(
                "the target kit needs a non-empty shared secret: without one anybody"
                " could tombstone the proxy's attempts"
            )
        self.backend = backend
        self._secret = secret.encode()

    def authentic(self, presented: str | None) -> bool:
        """Constant-time: the comparison leaks nothing about the secret's bytes."""
        return presented is not None and hmac.compare_digest(
            presented.encode(), self._secret
        )

    async def handle(self, method: str, path: str, presented_secret: str | None) -> Reply:
        """The answer to a request under the well-known prefix (``owns(path)``)."""
        if not self.authentic(presented_secret):
            return UNAUTHORIZED
        rest = path[len(WELL_KNOWN_PREFIX) :]
        tombstone = rest.endswith(TOMBSTONE_SUFFIX)
        key = rest[: -len(TOMBSTONE_SUFFIX)] if tombstone else rest
        if "/" in key or not key:
            return _reply(problem(404, "target-not-found", "No such kit endpoint", path))
        wanted = "PUT" if tombstone else "GET"
        if method != wanted:
            return _reply(
                problem(405, "target-method", "Method not allowed", f"use {wanted}"),
                Allow=wanted,
            )
        if not is_attempt_key(key):
            return _reply(
                problem(
                    400,
                    "target-attempt-key",
                    "Malformed attempt key",
                    "an attempt key is 16 to 128 base64url characters",
                )
            )
        try:
            if tombstone:
                return await self._tombstone(key)
            report = await self.backend.lookup(key)
        except KitNotInstalled as exc:
            return _reply(
                problem(503, "target-kit-not-installed", "Kit not installed", str(exc))
            )
        return _report(404 if report.state is AttemptState.ABSENT else 200, report)

    async def _tombstone(self, key: str) -> Reply:
        try:
            result = await self.backend.tombstone(key)
        except AttemptInProgress:
            log.info("tombstone %s: the attempt is committing, ask again", key)
            return _reply(in_progress_answer(key), **{"Retry-After": "1"})
        state = result.report.state
        log.info("tombstone %s: %s", key, "committed" if result.created else state)
        if result.created:
            return _report(201, result.report)
        return _report(409 if state is AttemptState.COMMITTED else 200, result.report)
