"""Where a matched request goes upstream (pure, no I/O).

The path forwarded is the normalised path the route was matched on
(``config.paths``), with the route's prefix stripped from that same path, so a target
never receives a spelling other than the one the proxy matched. The query is forwarded
as the client sent it; canonical forms are for hashing only.
"""

from __future__ import annotations

from yarl import URL

from effect_broker.config.contracts import Route
from effect_broker.config.paths import RequestPath


def upstream_url(
    route: Route, *, origin: str | None, path: RequestPath, raw_query: str
) -> str:
    """The URL to send to. ``origin`` is the absolute-form request's scheme://host:port
    in forward mode, None in reverse mode (where the route always has an upstream)."""
    forwarded = path.without_prefix(route.strip_prefix).forwarded
    base = route.upstream or origin
    if base is None:
        raise ValueError(f"route {route.name} has no upstream for a reverse-mode request")
    url = base.rstrip("/") + forwarded
    return f"{url}?{raw_query}" if raw_query else url


def base_url(route: Route, stored_url: str) -> str:
    """The upstream base a probe path is relative to: the route's, else the origin."""
    if route.upstream:
        return route.upstream
    return str(URL(stored_url, encoded=True).origin())


def well_known_origin(route: Route, stored_url: str) -> str:
    """Where a target kit's endpoints live: the origin's root, whatever base path the
    route's upstream has, as every ``/.well-known/`` location is (RFC 8615)."""
    return str(URL(base_url(route, stored_url), encoded=True).origin())
