"""Where unrecorded traffic may go: the egress policy for pass-through and blind tunnels.

Route traffic is not subject to it (a route's upstream is explicit configuration); what
no route claims could otherwise reach the proxy's own admin port, the ledger database,
or a cloud metadata service, with the proxy's network position. The decision is pure:
the caller hands over the host as written and, for a name, each address it resolved
to, and gets back None or the reason, naming the rule.

Order: ``proxy.deny`` always refuses; ``proxy.allow`` then permits; then the built-in
defaults refuse (the proxy's listen and admin ports, the ledger's host:port, link-local
and metadata addresses, and in a shared gateway loopback and private ranges); anything
else passes. A rule is a host (any port), ``host:port``, or a CIDR with an optional
``:port`` after it (``10.0.0.0/8``, ``[fd00::/8]:443``). Hosts compare by their
canonical identity (``config.hosts``), so one rule covers every spelling.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from ipaddress import IPv4Network, IPv6Network, ip_network
from typing import Annotated

from pydantic import AfterValidator, StringConstraints

from effect_broker.config.hosts import Host, canonical_host, split_authority

IPNetwork = IPv4Network | IPv6Network

LINK_LOCAL = ("169.254.0.0/16", "fe80::/10", "fd00:ec2::254")
GATEWAY_INTERNAL = (
    "localhost",
    "127.0.0.0/8",
    "::1/128",
    "0.0.0.0/8",
    "10.0.0.0/8",
    "172.16.0.0/12",
    "192.168.0.0/16",
    "100.64.0.0/10",
    "fc00::/7",
)


@dataclass(frozen=True, slots=True)
class EgressRule:
    """One host, host:port or network; ``origin`` names its source in messages."""

    text: str
    origin: str
    host: str | None = None  # canonical identity
    network: IPNetwork | None = None
    port: int | None = None

    def matches(self, host: Host, port: int) -> bool:
        if self.port is not None and self.port != port:
            return False
        if self.host is not None:
            return self.host == host.name
        assert self.network is not None
        return any(
            address.version == self.network.version and address in self.network
            for address in host.addresses()
        )


def parse_rule(text: str, origin: str) -> EgressRule:
    """A rule as written in proxy.deny or proxy.allow; ``ValueError`` says why not."""
    written = text.strip()
    if not written:
        raise ValueError("an empty rule; write a host, host:port or a CIDR")
    if "/" in written:
        network_text, port = written, None
        if written.startswith("["):
            inner, port = split_authority(written)
            network_text = inner[1:-1]
        try:
            network = ip_network(network_text, strict=False)
        except ValueError:
            raise ValueError(
                f"{text!r} is not a network: write a CIDR such as 10.0.0.0/8, "
                "fc00::/7 or [fd00::/8]:443"
            ) from None
        return EgressRule(text, origin, network=network, port=port)
    name, port = split_authority(written)
    if not name or any(c in name for c in " @?#"):
        raise ValueError(f"{text!r} is not a host: write e.g. metadata.internal:80")
    return EgressRule(text, origin, host=canonical_host(name).name, port=port)


def _checked_rule(value: str) -> str:
    parse_rule(value, "proxy")
    return value


# A rule as routes.yaml's proxy.deny and proxy.allow take it, checked on load.
EgressRuleText = Annotated[
    str, StringConstraints(min_length=1), AfterValidator(_checked_rule)
]


def default_rules(
    *,
    listen: Iterable[str] = (),
    admin: Iterable[str] = (),
    ledger: Iterable[str] = (),
    gateway: bool = False,
) -> tuple[EgressRule, ...]:
    """The built-in refusals for this process's own addresses and its mode."""
    rules: list[EgressRule] = []
    for authorities, origin in (
        (listen, "the proxy's own listen address (a request would loop)"),
        (admin, "the admin API's address"),
        (ledger, "the ledger database's address"),
    ):
        rules += [parse_rule(authority, origin) for authority in authorities]
    rules += [
        parse_rule(text, "link-local and metadata addresses") for text in LINK_LOCAL
    ]
    if gateway:
        origin = "a shared gateway (EFFECT_BROKER_GATEWAY=true) refuses internal hosts"
        rules += [parse_rule(text, origin) for text in GATEWAY_INTERNAL]
    return tuple(rules)


@dataclass(frozen=True, slots=True)
class EgressPolicy:
    """The three rule lists, in the order they are consulted."""

    deny: tuple[EgressRule, ...] = ()
    allow: tuple[EgressRule, ...] = ()
    defaults: tuple[EgressRule, ...] = field(default_factory=default_rules)

    @classmethod
    def from_lists(
        cls, deny: Iterable[str], allow: Iterable[str], defaults: Iterable[EgressRule]
    ) -> EgressPolicy:
        return cls(
            deny=tuple(parse_rule(text, "proxy.deny") for text in deny),
            allow=tuple(parse_rule(text, "proxy.allow") for text in allow),
            defaults=tuple(defaults),
        )

    def with_defaults(self, rules: Iterable[EgressRule]) -> EgressPolicy:
        return EgressPolicy(self.deny, self.allow, (*self.defaults, *rules))

    def refusal(self, port: int, *hosts: Host) -> str | None:
        """Why a connection to ``port`` on ``hosts`` (as written, and each resolved
        address) is refused, or None. Every host must pass a refusing rule."""
        for rule in self.deny:
            if any(rule.matches(host, port) for host in hosts):
                return _refused(hosts, port, rule, hint=False)
        if any(rule.matches(host, port) for rule in self.allow for host in hosts):
            return None
        for rule in self.defaults:
            if any(rule.matches(host, port) for host in hosts):
                return _refused(hosts, port, rule, hint=True)
        return None


def _refused(hosts: tuple[Host, ...], port: int, rule: EgressRule, *, hint: bool) -> str:
    written, matched = hosts[0], next(h for h in hosts if rule.matches(h, port))
    where = written.authority(port)
    if matched != written:
        where += f" (which resolves to {matched.authority(None)})"
    message = f"{where} is refused by {rule.origin}: {rule.text!r}"
    if hint:
        message += "; list it in proxy.allow in routes.yaml if this traffic is intended"
    return message
