"""The egress policy applied where unrecorded traffic leaves: pass-through and tunnels.

A check of the host as written is not enough: a name can resolve to the admin port or a
metadata address, and a second lookup at connect time could answer differently (DNS
rebinding). So the guard checks twice, and connects only to what it checked:

- before anything else, the host as written (its canonical identity, ``config.hosts``);
- at connect time, every address the name resolves to: one denied address refuses the
  whole name. Pass-through uses an aiohttp resolver that does this check (aiohttp then
  connects to exactly the addresses returned, and caches nothing: ``use_dns_cache`` is
  off); a tunnel resolves through the same guard and opens a socket to the checked
  address itself.

The policy is held here, not in the frozen ``ProxyState``, because the proxy's own
ports are known only once its sites are bound (port 0 in tests): ``protect`` adds them.
"""

from __future__ import annotations

import asyncio
import socket
import ssl
from collections.abc import Awaitable, Callable
from ipaddress import ip_address

import aiohttp
from aiohttp.abc import AbstractResolver, ResolveResult

from effect_broker.config.egress import EgressPolicy, default_rules
from effect_broker.config.hosts import (
    Host,
    canonical_host,
    host_of_address,
    lookup_refusal,
)
from effect_broker.engine.upstream import one_try, upstream_tls
from effect_broker.errors import EgressRefused, MalformedRequest
from effect_broker.proxy.edge_input import printable

#: Hosts as written that passed the policy, remembered up to this many (then forgotten).
PASSED_CACHE_SIZE = 4096

Opener = Callable[
    [str, int], Awaitable[tuple[asyncio.StreamReader, asyncio.StreamWriter]]
]


class EgressGuard:
    """Decides, and enforces at connect time, where unrecorded traffic may go."""

    def __init__(
        self, policy: EgressPolicy, resolver: AbstractResolver | None = None
    ) -> None:
        self.policy = policy
        self.resolver: AbstractResolver = resolver or aiohttp.ThreadedResolver()
        self.opener: Opener = asyncio.open_connection  # replaceable in tests
        # Every pass-through request is checked; the answer for a (host, port) as
        # written only changes with the policy, so passes are kept until ``protect``.
        self._passed: dict[tuple[str, int], Host] = {}

    def protect(self, *, listen: tuple[str, int], admin: tuple[str, int]) -> None:
        """Refuse the bound proxy and admin addresses too (known only after binding)."""
        self.policy = self.policy.with_defaults(
            default_rules(
                listen=[_authority(*listen)], admin=[_authority(*admin)], ledger=()
            )
        )
        self._passed.clear()

    def check(self, host: str, port: int) -> Host:
        """The identity of ``host`` as written; ``EgressRefused`` if policy refuses it,
        ``MalformedRequest`` if no resolver could look it up (see ``lookup_refusal``)."""
        passed = self._passed.get((host, port))
        if passed is not None:
            return passed
        unusable = lookup_refusal(host)
        if unusable is not None:
            raise MalformedRequest(
                f"{printable(host[:100])!r} is not a host name or IP address: {unusable}"
            )
        written = canonical_host(host)
        refusal = self.policy.refusal(port, written)
        if refusal is not None:
            raise EgressRefused(refusal)
        if len(self._passed) >= PASSED_CACHE_SIZE:
            self._passed.clear()
        self._passed[(host, port)] = written
        return written

    async def resolve(
        self, host: str, port: int, family: socket.AddressFamily = socket.AF_UNSPEC
    ) -> list[ResolveResult]:
        """The checked addresses to connect to; ``EgressRefused`` if any is denied."""
        written = self.check(host, port)
        if written.address is not None:
            answers = [_result(host, str(written.address), port)]
        elif written.is_loopback:
            answers = [_result(host, "127.0.0.1", port)]
        else:
            answers = await self.resolver.resolve(host, port, family=family)
        for answer in answers:
            resolved = host_of_address(ip_address(answer["host"].split("%", 1)[0]))
            refusal = self.policy.refusal(port, written, resolved)
            if refusal is not None:
                raise EgressRefused(refusal)
        return answers

    async def open_connection(
        self, host: str, port: int
    ) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
        """A tunnel's upstream socket, opened to the first checked address."""
        answers = await self.resolve(host, port)
        return await self.opener(answers[0]["host"], port)

    def session(
        self, *, limit: int, tls: ssl.SSLContext | None = None
    ) -> aiohttp.ClientSession:
        """The pass-through client: every name goes through ``CheckingResolver``, and
        certificates are verified like the effects' (``tls``, else the system store),
        and a request is tried once (what the client sees is what the target said)."""
        return one_try(
            aiohttp.ClientSession(
                connector=aiohttp.TCPConnector(
                    limit=limit,
                    resolver=CheckingResolver(self),
                    use_dns_cache=False,
                    ssl=tls or upstream_tls(),
                ),
                auto_decompress=False,
                cookie_jar=aiohttp.DummyCookieJar(),
                trust_env=False,
                skip_auto_headers=(
                    "User-Agent",
                    "Accept-Encoding",
                    "Accept",
                    "Content-Type",
                ),
            )
        )


class CheckingResolver(AbstractResolver):
    """aiohttp's resolver for pass-through: resolves through the guard, so a connection
    is only ever made to an address the policy has just checked."""

    def __init__(self, guard: EgressGuard) -> None:
        self._guard = guard

    async def resolve(
        self, host: str, port: int = 0, family: socket.AddressFamily = socket.AF_INET
    ) -> list[ResolveResult]:
        return await self._guard.resolve(host, port, family)

    async def close(self) -> None:
        await self._guard.resolver.close()


def _authority(host: str, port: int) -> str:
    return f"[{host}]:{port}" if ":" in host else f"{host}:{port}"


def _result(hostname: str, address: str, port: int) -> ResolveResult:
    return ResolveResult(
        hostname=hostname,
        host=address,
        port=port,
        family=socket.AF_INET6 if ":" in address else socket.AF_INET,
        proto=0,
        flags=socket.AI_NUMERICHOST,
    )
