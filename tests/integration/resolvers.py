"""Name resolution the tests decide, instead of the machine's hosts file and DNS.

A test that needs a name not to resolve must not depend on the machine: a hosts file
or a search domain can map ``payments.internal`` to an address that answers. Such a
test puts ``Unresolvable`` in place of the resolver the proxy's egress guard uses.
"""

from __future__ import annotations

import socket
from collections.abc import Iterable

from aiohttp.abc import AbstractResolver, ResolveResult


class Unresolvable(AbstractResolver):
    """Every name in ``names`` fails as a name the resolver does not know; any other
    name is a test mistake, refused just the same but saying so."""

    def __init__(self, names: Iterable[str]) -> None:
        self.names = frozenset(names)
        self.asked: list[str] = []

    async def resolve(
        self, host: str, port: int = 0, family: socket.AddressFamily = socket.AF_INET
    ) -> list[ResolveResult]:
        self.asked.append(host)
        if host in self.names:
            raise socket.gaierror(socket.EAI_NONAME, "Name or service not known")
        raise socket.gaierror(socket.EAI_FAIL, f"{host}: not a name this test resolves")

    async def close(self) -> None:
        return None
