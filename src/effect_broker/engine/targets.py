"""Where a matched request goes upstream, and what it carries there (pure, no I/O).

The path forwarded is the normalised path the route was matched on
(``config.paths``), with the route's prefix stripped from that same path, so a target
never receives a spelling other than the one the proxy matched. The query is forwarded
as the client sent it; canonical forms are for hashing only.
"""

from __future__ import annotations

from collections.abc import Mapping

from yarl import URL

from effect_broker.config.contracts import Route
from effect_broker.config.paths import RequestPath
from effect_broker.engine.lookup import current_attempt_key
from effect_broker.engine.messages import StoredRequest
from effect_broker.engine.protocol import TargetProtocol
from effect_broker.headers import upstream_request_headers
from effect_broker.models import Effect, SafetyClass


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


def wire_key(effect: Effect) -> str:
    """The key the target sees on the effect's current attempt: the derived key, or
    for a transactional target that attempt's own key (derived from it per attempt)."""
    if effect.safety is SafetyClass.TRANSACTIONAL:
        return current_attempt_key(effect)
    return effect.downstream_key


def outgoing_request(
    route: Route,
    stored: StoredRequest,
    downstream_key: str,
    injected: Mapping[str, Mapping[str, str]],
    protocol: TargetProtocol | None = None,
) -> StoredRequest:
    """The stored request with this route's derived key and credentials put in.

    ``downstream_key`` is what ``wire_key`` gives: a transactional attempt's key goes
    out in the attempt key header and is never part of the stored request.
    """
    headers = upstream_request_headers(
        stored.headers,
        operation_key_header=route.operation_key_header,
        downstream_header=route.contract.downstream_header,
        downstream_key=downstream_key,
        inject=injected.get(route.name, {}),
    )
    outgoing = StoredRequest(stored.method, stored.url, headers, stored.body)
    if protocol is None:
        return outgoing
    return protocol.with_key(outgoing, route.contract, downstream_key)
