"""Where a matched request goes upstream (pure, no I/O).

The path and query bytes are forwarded exactly as the client sent them; only the origin
(and, in reverse mode, a stripped prefix) changes. Canonical forms are for hashing only.
"""

from __future__ import annotations

from yarl import URL

from effect_broker.config.contracts import Route


def upstream_url(
    route: Route, *, origin: str | None, raw_path: str, raw_query: str
) -> str:
    """The URL to send to. ``origin`` is the absolute-form request's scheme://host:port
    in forward mode, None in reverse mode (where the route always has an upstream)."""
    path = raw_path
    if route.strip_prefix and path.startswith(route.strip_prefix):
        path = path[len(route.strip_prefix) :] or "/"
    if not path.startswith("/"):
        path = "/" + path
    base = route.upstream or origin
    if base is None:
        raise ValueError(f"route {route.name} has no upstream for a reverse-mode request")
    url = base.rstrip("/") + path
    return f"{url}?{raw_query}" if raw_query else url


def base_url(route: Route, stored_url: str) -> str:
    """The upstream base a probe path is relative to: the route's, else the origin."""
    if route.upstream:
        return route.upstream
    return str(URL(stored_url, encoded=True).origin())
