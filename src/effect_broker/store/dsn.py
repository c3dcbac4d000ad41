"""Where the ledger's connections go: the TCP endpoints a PostgreSQL DSN names.

The egress policy refuses tunnels and pass-through to the ledger, so it must know the
ledger's addresses in every spelling the DSN may use: ``host:port`` in the URL, several
hosts (``h1,h2:5433``), ``host``, ``hostaddr`` and ``port`` as query parameters
(``postgresql://u@/db?host=127.0.0.1&port=5432``), IPv6 literals, libpq's
``key=value`` form, and ``PGHOST``/``PGPORT`` when the DSN names no host. Reading only
the URL's host part missed all but the first. So the addresses come from asyncpg's own
parser, the one the store connects with; only the spellings it does not read (the
``key=value`` form, a bare IPv6 literal in ``host=``, ``hostaddr``) are translated or
added here. A Unix socket is not reachable over TCP and gives no endpoint.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from ipaddress import ip_address
from typing import Any
from urllib.parse import parse_qsl, urlencode, urlsplit, urlunsplit

from asyncpg import connect_utils
from asyncpg.exceptions import InterfaceError

URL_SCHEMES = ("postgresql", "postgres")
#: The conninfo keywords that say where the server is; the rest cannot move it.
WHERE = ("host", "hostaddr", "port", "service")
DEFAULT_PORT = 5432
_CONNINFO_PAIR = re.compile(
    r"\s*(?P<key>[A-Za-z_]+)\s*=\s*"
    r"(?:'(?P<quoted>(?:[^'\\]|\\.)*)'|(?P<bare>(?:[^\s'\\]|\\.)+))"
)
_ESCAPE = re.compile(r"\\(.)")

# asyncpg's own DSN reader (private, so untyped in its stubs): the addresses it returns
# are exactly those the store's connections go to.
ParsedDsn = tuple[list[str | tuple[str, int]], Any]
_parse_connect_dsn_and_args: Callable[..., ParsedDsn]
_parse_connect_dsn_and_args = connect_utils._parse_connect_dsn_and_args  # type: ignore[attr-defined]


def ledger_endpoints(dsn: str | None) -> list[tuple[str, int]]:
    """(host, port) of every TCP server the DSN may connect to, in order; host as
    written (a name, or an IP literal without brackets).

    An empty or unreadable DSN gives none: the store cannot connect with it either, so
    the proxy never starts with it.
    """
    if not dsn or not dsn.strip():
        return []
    try:
        url = _as_url(dsn.strip())
        addresses, parameters = _parse_connect_dsn_and_args(
            dsn=url,
            host=None,
            port=None,
            # Given, so that the parser neither reads a password file nor builds a
            # TLS context: only where it connects matters here.
            user="-",
            password="",
            passfile=None,
            database="-",
            ssl=False,
            service=None,
            servicefile=None,
            direct_tls=False,
            server_settings=None,
            target_session_attrs="any",
            krbsrvname=None,
            gsslib="gssapi",
        )
    except (InterfaceError, ValueError):
        return []
    endpoints = [
        (host, port)
        for host, port in (a for a in addresses if isinstance(a, tuple))
        if host
    ]
    # libpq connects to hostaddr (an IP) instead of resolving host; asyncpg passes it
    # on as a server setting. Refuse it on every port the DSN names.
    hostaddr = (parameters.server_settings or {}).get("hostaddr", "")
    ports = sorted({port for _, port in endpoints}) or [DEFAULT_PORT]
    for address in filter(None, (a.strip() for a in hostaddr.split(","))):
        endpoints += [(address, port) for port in ports]
    return list(dict.fromkeys(endpoints))


def _as_url(dsn: str) -> str:
    """The DSN as a URL asyncpg reads as libpq would: ``key=value`` translated, and a
    bare IPv6 literal in a ``host`` parameter bracketed."""
    parts = urlsplit(dsn)
    if parts.scheme.lower() not in URL_SCHEMES:
        return "postgresql://?" + urlencode(_bracketed(conninfo_pairs(dsn)))
    if not parts.query:
        return dsn
    query = _bracketed(parse_qsl(parts.query, keep_blank_values=True))
    return urlunsplit(parts._replace(query=urlencode(query)))


def conninfo_pairs(text: str) -> list[tuple[str, str]]:
    """The location keywords of a libpq ``key=value`` string (values may be quoted
    with ``'...'``, with ``\\'`` and ``\\\\`` escapes). ``ValueError`` if unreadable."""
    pairs: list[tuple[str, str]] = []
    position = 0
    while text[position:].strip():
        found = _CONNINFO_PAIR.match(text, position)
        if found is None:
            raise ValueError(f"not a key=value connection string at {position}")
        value = found["quoted"] if found["quoted"] is not None else found["bare"]
        if found["key"] in WHERE:
            pairs.append((found["key"], _ESCAPE.sub(r"\1", value)))
        position = found.end()
    return pairs


def _bracketed(pairs: list[tuple[str, str]]) -> list[tuple[str, str]]:
    """``host=::1`` (valid for libpq) as ``host=[::1]``, which asyncpg reads."""

    def item(text: str) -> str:
        text = text.strip()
        try:
            address = ip_address(text.split("%", 1)[0])
        except ValueError:
            return text
        return f"[{text}]" if address.version == 6 else text

    return [
        (key, ",".join(item(h) for h in value.split(",")) if key == "host" else value)
        for key, value in pairs
    ]
