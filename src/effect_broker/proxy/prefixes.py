"""Where a request that no route records goes when routes claim its prefix or host.

Pure: no I/O. In reverse mode an SDK pointed at a route's prefix
(``OPENAI_BASE_URL=http://sidecar/openai/v1``) makes calls the routes never record
(``GET /openai/v1/models``); without pass-through its first such call is a 404 and the
SDK breaks. So a request below a route's ``strip_prefix`` goes to that route's upstream,
unrecorded, prefix stripped, as it would in forward mode. A route with ``passthrough:
false`` refuses such requests instead, and the refusal names the routes that exist there,
so the caller can tell a typo from a policy. In forward mode the same flag refuses
unrecorded requests to the route's host.
"""

from __future__ import annotations

from collections.abc import Iterable
from urllib.parse import unquote

from effect_broker.config.contracts import Route
from effect_broker.config.paths import RequestPath
from effect_broker.config.routing import RouteTable
from effect_broker.errors import RouteNotFound, RouteRefused


def prefix_segments(prefix: str) -> tuple[str, ...]:
    """The decoded segments of a ``strip_prefix``, as in ``RequestPath.decoded``."""
    return tuple(unquote(part) for part in prefix.split("/") if part)


def routes_under(routes: Iterable[Route], path: RequestPath) -> tuple[Route, ...]:
    """The reverse-mode routes whose ``strip_prefix`` is the longest one ``path`` is
    under; empty when it is under none."""
    best: list[Route] = []
    best_length = 0
    for route in routes:
        if route.match.host is not None or not route.strip_prefix:
            continue
        want = prefix_segments(route.strip_prefix)
        if not want or path.decoded[: len(want)] != want:
            continue
        if len(want) > best_length:
            best, best_length = [route], len(want)
        elif len(want) == best_length:
            best.append(route)
    return tuple(best)


def describe(routes: Iterable[Route]) -> str:
    """``name (METHOD path)`` for each route, for a person reading a refusal."""
    return ", ".join(
        f"{route.name} ({'|'.join(sorted(route.match.methods))} {route.match.path})"
        for route in routes
    )


def passthrough_route(
    routes: Iterable[Route], method: str, path: RequestPath
) -> Route | None:
    """The route whose upstream an unrecorded reverse-mode request goes to.

    None when no route's prefix covers the path. ``RouteNotFound`` when the routes there
    refuse pass-through, or disagree on where it would go (two upstreams under one
    prefix: the proxy will not guess).
    """
    owners = routes_under(routes, path)
    if not owners:
        return None
    prefix = owners[0].strip_prefix
    closed = [route for route in owners if not route.passthrough]
    if closed:
        names = ", ".join(route.name for route in closed)
        raise RouteNotFound(
            f"no route records {method} {path.text}, and the routes under {prefix} "
            f"refuse anything else (passthrough: false on {names}). "
            f"Routes there: {describe(owners)}"
        )
    upstreams = {route.upstream for route in owners}
    if len(upstreams) > 1:
        raise RouteNotFound(
            f"no route records {method} {path.text}, and the routes under {prefix} "
            f"send to different upstreams, so it cannot be passed through: "
            f"{describe(owners)}. Give them distinct prefixes"
        )
    return owners[0]


def forward_refusal(table: RouteTable, host: str, method: str, path: str) -> None:
    """``RouteRefused`` when a route watching ``host`` refuses unrecorded requests."""
    watching = table.watching(host)
    closed = [route for route in watching if not route.passthrough]
    if closed:
        raise RouteRefused(
            f"no route records {method} {path} on {host}, and "
            f"{', '.join(r.name for r in closed)} set passthrough: false for it. "
            f"Routes for {host}: {describe(watching)}"
        )


def reverse_prefixes(routes: Iterable[Route]) -> list[str]:
    """Every reverse-mode prefix, for the 404 of a path under none of them."""
    return sorted(
        {
            route.strip_prefix
            for route in routes
            if route.match.host is None and route.strip_prefix
        }
    )
