"""One canonical identity per host: pure, no I/O, no DNS.

Routes, the CONNECT guard and the egress policy must all agree on when two spellings name
the same machine, or a spelling the resolver accepts slips past a check written for
another. The identity folds:

- case and a trailing dot (``LOCALHOST.`` is ``localhost``), and IDNA for non-ASCII names
  (full-width letters spelling localhost are ``localhost``);
- every IPv4 spelling ``inet_aton`` (and so glibc's resolver) accepts: one to four parts,
  each decimal, ``0x`` hex or ``0``-led octal, the last filling the remaining bytes
  (``2130706433``, ``0x7f000001``, ``0177.0.0.1``, ``127.1``);
- IPv6 to its compressed form, and IPv4-mapped IPv6 (``::ffff:127.0.0.1``) to the IPv4;
- the whole loopback range, the unspecified addresses (a connect to ``0.0.0.0`` or
  ``::`` reaches this machine) and ``localhost`` names (RFC 6761) to one host,
  ``localhost``: whatever listens on one of them is usually reachable through all.

A port is kept apart; the default ports 80 and 443 fold to "no port" where routes are
concerned, because a forward route for ``h`` is written once for both schemes.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from functools import lru_cache
from ipaddress import IPv4Address, IPv6Address, ip_address

from effect_broker.config.ipv6_embedding import embedded_ipv4

LOOPBACK = "localhost"
DEFAULT_PORTS = frozenset({80, 443})

IPAddress = IPv4Address | IPv6Address
_IPV4_PART = re.compile(r"0[xX][0-9a-fA-F]*|0[0-7]*|[1-9][0-9]*")


@dataclass(frozen=True, slots=True)
class Host:
    """A host as the network sees it: ``name`` is the canonical identity (an IP in its
    canonical text, ``localhost`` for every loopback spelling, else the lower-case DNS
    name); ``address`` is the IP when the host was written as one."""

    name: str
    address: IPAddress | None = None

    @property
    def is_loopback(self) -> bool:
        return self.name == LOOPBACK

    def addresses(self) -> tuple[IPAddress, ...]:
        """Addresses known without DNS: the literal, each IPv4 address an IPv6 literal
        embeds (NAT64, 6to4, ...: see ``ipv6_embedding``), and for loopback the usual
        two. Network rules match any of them."""
        known: list[IPAddress] = [] if self.address is None else [self.address]
        if isinstance(self.address, IPv6Address):
            known += embedded_ipv4(self.address)
        if self.is_loopback:
            known += [IPv4Address("127.0.0.1"), IPv6Address("::1")]
        return tuple(known)

    def authority(self, port: int | None) -> str:
        """``name[:port]``, an IPv6 name in brackets; ``port`` None means none."""
        name = f"[{self.name}]" if ":" in self.name else self.name
        return name if port is None else f"{name}:{port}"


def parse_ipv4(text: str) -> IPv4Address | None:
    """The address ``inet_aton`` reads from ``text``, or None if it is not one."""
    parts = text.split(".")
    if not 1 <= len(parts) <= 4 or not all(_IPV4_PART.fullmatch(p) for p in parts):
        return None
    values = []
    for part in parts:
        if part[:2] in ("0x", "0X"):
            values.append(int(part[2:] or "0", 16))
        elif len(part) > 1 and part[0] == "0":
            values.append(int(part, 8))
        else:
            values.append(int(part))
    *head, last = values
    if any(value > 255 for value in head) or last >= 256 ** (4 - len(head)):
        return None
    number = last
    for index, value in enumerate(head):
        number += value << (8 * (3 - index))
    return IPv4Address(number)


def canonical_address(address: IPAddress) -> IPAddress:
    """IPv4-mapped IPv6 as the IPv4 it carries; anything else unchanged."""
    if isinstance(address, IPv6Address):
        if address.ipv4_mapped is not None:
            return address.ipv4_mapped
        if address.scope_id is not None:
            return IPv6Address(str(address).split("%", 1)[0])
    return address


def _is_loopback(address: IPAddress) -> bool:
    return address.is_loopback or address.is_unspecified


def host_of_address(address: IPAddress) -> Host:
    """The identity of a connected (or resolved) address."""
    address = canonical_address(address)
    name = LOOPBACK if _is_loopback(address) else str(address)
    return Host(name, address)


@lru_cache(maxsize=4096)
def canonical_host(text: str) -> Host:
    """The identity of a host name or IP literal as written (no port).

    Cached: routing and the egress check ask it for every forward-mode request, and
    agents talk to a handful of hosts; ``Host`` is frozen, so a shared copy is safe.
    """
    name = text.strip().lower()
    if name.startswith("[") and name.endswith("]"):
        name = name[1:-1]
    name = name.rstrip(".")
    if not name.isascii():
        try:
            name = name.encode("idna").decode("ascii").lower()
        except UnicodeError:
            return Host(name)
    if ":" in name:
        try:
            return host_of_address(ip_address(name))
        except ValueError:
            return Host(name)
    ipv4 = parse_ipv4(name)
    if ipv4 is not None:
        return host_of_address(ipv4)
    if name == LOOPBACK or name.endswith("." + LOOPBACK):
        return Host(LOOPBACK)
    return Host(name)


def lookup_refusal(host: str) -> str | None:
    """Why no resolver can be asked about ``host`` (an IP literal or a DNS name), or None.

    ``getaddrinfo`` IDNA-encodes a name first and raises ``UnicodeError`` (not an
    ``OSError``) for an empty label, a label over 63 bytes or a name the codec refuses;
    a caller that checks here answers the client instead of failing mid-connect.
    """
    try:
        ip_address(host)
        return None
    except ValueError:
        pass
    try:
        host.encode("idna")
    except UnicodeError as exc:
        reason = str(exc.__cause__ or exc)
        return f"it cannot be encoded as a DNS name ({reason})"
    return None


def split_authority(text: str) -> tuple[str, int | None]:
    """``host[:port]`` into host and port; a bare IPv6 has no port. ``ValueError`` for a
    port that is not a number in 0-65535."""
    text = text.strip()
    if text.startswith("["):
        end = text.find("]")
        if end < 0:
            raise ValueError(f"{text!r}: an IPv6 address needs its closing ']'")
        host, rest = text[: end + 1], text[end + 1 :]
        if rest and not rest.startswith(":"):
            raise ValueError(f"{text!r}: expected ':port' after ']'")
        port_text = rest[1:]
    elif text.count(":") == 1:
        host, port_text = text.split(":")
    else:
        host, port_text = text, ""
    if not port_text:
        return host, None
    if not port_text.isascii() or not port_text.isdigit() or int(port_text) > 65535:
        raise ValueError(f"{text!r}: port {port_text!r} is not a number in 0-65535")
    return host, int(port_text)


def route_key(authority: str) -> str:
    """The form routes are indexed by: canonical host, port unless 80 or 443."""
    host, port = split_authority(authority)
    return canonical_host(host).authority(None if port in DEFAULT_PORTS else port)


def host_key(authority: str) -> str:
    """The canonical host of an authority, port dropped: what the CONNECT guard uses."""
    return canonical_host(split_authority(authority)[0]).name


def http_url(host: str, port: int) -> str:
    """``http://host:port`` with an IPv6 host in brackets (``http://[::1]:8080``): the
    form a URL, a proxy variable or a browser accepts; ``::1:8080`` is none of them."""
    bare = host.strip("[]")
    shown = f"[{bare}]" if ":" in bare else bare
    return f"http://{shown}:{port}"
