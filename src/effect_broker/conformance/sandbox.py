"""Where the verification's requests go, and what they carry.

The requests go straight to the route's upstream (never through a proxy, which would
hide the target's own behaviour), with the route's injected headers resolved from the
environment, as the proxy would send them. Each check uses a fresh key of its own, so
a run never collides with real traffic's keys or with an earlier run.
"""

from __future__ import annotations

import json
import secrets
import time
from collections.abc import Mapping
from dataclasses import dataclass, field

import aiohttp

from effect_broker.config.contracts import Route
from effect_broker.config.paths import normalize_path
from effect_broker.config.routes_file import resolve_inject_headers
from effect_broker.engine.targets import base_url, upstream_url

DEFAULT_TIMEOUT = 30.0


@dataclass(frozen=True, slots=True)
class SandboxRequest:
    """The request a check sends, and the drifted one (same key, another payload)."""

    method: str
    path: str
    body: bytes
    content_type: str = "application/json"
    drift_body: bytes | None = None


@dataclass(frozen=True, slots=True)
class Answer:
    """One answer from the target, and when it came."""

    status: int
    body: bytes
    at: float  # time.monotonic()

    def effect_id(self, pointer: str) -> str | None:
        """The effect's id at JSON pointer ``pointer`` (``/id``), if the body has one."""
        try:
            document = json.loads(self.body)
        except ValueError:
            return None
        current = document
        for token in pointer.lstrip("/").split("/"):
            if not isinstance(current, dict) or token not in current:
                return None
            current = current[token]
        return str(current) if isinstance(current, str | int) else None

    def brief(self) -> str:
        text = self.body[:160].decode("utf-8", "replace").replace("\n", " ")
        return f"{self.status} {text}"

    @property
    def ok(self) -> bool:
        return 200 <= self.status < 300


@dataclass
class Sandbox:
    """A route's target, reached directly: its URL, its headers, the request to send."""

    url: str
    probe_base: str
    request: SandboxRequest
    headers: Mapping[str, str] = field(default_factory=dict)
    effect_id_pointer: str = "/id"
    timeout: float = DEFAULT_TIMEOUT

    @staticmethod
    def fresh_key(purpose: str) -> str:
        return f"verify-{purpose}-{secrets.token_hex(8)}"

    async def send(
        self,
        session: aiohttp.ClientSession,
        key_header: str | None,
        key: str,
        body: bytes | None = None,
    ) -> Answer:
        headers = {**self.headers, "Content-Type": self.request.content_type}
        if key_header:
            headers[key_header] = key
        async with session.request(
            self.request.method,
            self.url,
            data=self.request.body if body is None else body,
            headers=headers,
            timeout=aiohttp.ClientTimeout(total=self.timeout),
        ) as response:
            return Answer(response.status, await response.read(), time.monotonic())

    async def get(self, session: aiohttp.ClientSession, method: str, url: str) -> Answer:
        async with session.request(
            method,
            url,
            headers=dict(self.headers),
            timeout=aiohttp.ClientTimeout(total=self.timeout),
        ) as response:
            return Answer(response.status, await response.read(), time.monotonic())


def sandbox_for(
    route: Route,
    request: SandboxRequest,
    environ: Mapping[str, str],
    *,
    origin: str | None = None,
    effect_id_pointer: str = "/id",
) -> Sandbox:
    """The sandbox of ``route``: its upstream URL for ``request.path``, its headers.

    ``origin`` (scheme://host:port) is needed for a forward-mode route without an
    upstream; ``resolve_inject_headers`` raises ``ConfigError`` for a missing secret.
    """
    if route.upstream is None and origin is None:
        host = route.match.host
        origin = f"https://{host}" if host else None
    url = upstream_url(
        route, origin=origin, path=normalize_path(request.path), raw_query=""
    )
    return Sandbox(
        url=url,
        probe_base=base_url(route, url),
        request=request,
        headers=dict(resolve_inject_headers(route, environ)),
        effect_id_pointer=effect_id_pointer,
    )
