"""A whole validated routes file: proxy policy, contracts, routes and their match index.

Kept apart from ``contracts`` so that routing can index routes without importing the
file-level value that owns the index.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

from effect_broker.config.contracts import (
    DEFAULT_OPERATION_KEY_HEADER,
    ConnectPolicy,
    Contract,
    Route,
    UnmatchedPolicy,
    frozen_mapping,
)
from effect_broker.config.routing import RouteTable


@dataclass(frozen=True, slots=True)
class ProxyPolicy:
    """Proxy-wide behaviour for what no route claims."""

    operation_key_header: str = DEFAULT_OPERATION_KEY_HEADER
    unmatched: UnmatchedPolicy = "pass"
    connect: ConnectPolicy = "tunnel"
    deny: tuple[str, ...] = ()  # egress rules as written; see config.egress
    allow: tuple[str, ...] = ()


@dataclass(frozen=True, slots=True)
class RoutesConfig:
    """A whole validated routes file; ``table`` is the match index, built once here."""

    version: int
    proxy: ProxyPolicy
    contracts: Mapping[str, Contract]
    routes: tuple[Route, ...]
    source: str = "<config>"
    table: RouteTable = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "contracts", frozen_mapping(self.contracts))
        object.__setattr__(self, "routes", tuple(self.routes))
        object.__setattr__(self, "table", RouteTable(self.routes))
