"""The IPv4 addresses an IPv6 address carries inside it (pure, no I/O).

An IPv4 destination can be spelled as IPv6 in several standard ways, and where a
translator or relay exists on the path, connecting to the IPv6 spelling reaches the IPv4
host: a policy that refuses ``169.254.169.254`` must refuse ``64:ff9b::a9fe:a9fe`` too.
``embedded_ipv4`` lists every IPv4 address an IPv6 address may stand for, so the egress
rules can be checked against each of them. Listing one too many only ever refuses more.

Covered: IPv4-mapped (``::ffff:0:0/96``) and IPv4-translated (``::ffff:0:0:0/96``),
IPv4-compatible (``::/96``, deprecated), NAT64's well-known prefix (``64:ff9b::/96``,
RFC 6052) and local-use prefix (``64:ff9b:1::/48``, RFC 8215, in each RFC 6052 layout
from /48 to /96), 6to4 (``2002::/16``), Teredo (``2001::/32``: server and client), and
ISATAP interface identifiers (``::5efe:a.b.c.d``, any prefix).
"""

from __future__ import annotations

from ipaddress import IPv4Address, IPv6Address, IPv6Network

NAT64_WELL_KNOWN = IPv6Network("64:ff9b::/96")
NAT64_LOCAL_USE = IPv6Network("64:ff9b:1::/48")
SIX_TO_FOUR = IPv6Network("2002::/16")
TEREDO = IPv6Network("2001::/32")
MAPPED = IPv6Network("::ffff:0:0/96")
TRANSLATED = IPv6Network("::ffff:0:0:0/96")
COMPATIBLE = IPv6Network("::/96")
ISATAP_IDS = (b"\x00\x00\x5e\xfe", b"\x02\x00\x5e\xfe")


def _v4(octets: bytes) -> IPv4Address:
    return IPv4Address(octets)


def embedded_ipv4(address: IPv6Address) -> tuple[IPv4Address, ...]:
    """Every IPv4 address ``address`` embeds under a standard scheme, in no order."""
    packed = address.packed
    found: list[IPv4Address] = []
    if address in MAPPED or address in TRANSLATED or address in COMPATIBLE:
        found.append(_v4(packed[12:]))
    if address in NAT64_WELL_KNOWN:
        found.append(_v4(packed[12:]))
    if address in NAT64_LOCAL_USE:
        # RFC 6052 section 2.2: bits 64-71 (the "u" octet) never carry the address.
        found += [
            _v4(packed[6:8] + packed[9:11]),  # a /48 prefix
            _v4(packed[7:8] + packed[9:12]),  # /56
            _v4(packed[9:13]),  # /64
            _v4(packed[12:]),  # /96
        ]
    if address in SIX_TO_FOUR:
        found.append(_v4(packed[2:6]))
    if address in TEREDO:
        found.append(_v4(packed[4:8]))  # the Teredo server
        found.append(_v4(bytes(b ^ 0xFF for b in packed[12:])))  # the client, obscured
    if packed[8:12] in ISATAP_IDS:
        found.append(_v4(packed[12:]))
    return tuple(dict.fromkeys(found))
