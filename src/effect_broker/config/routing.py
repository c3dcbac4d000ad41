"""Which route owns a request: pure matching, no I/O.

The rules, chosen so that a trivially different spelling of a protected request cannot
slip past the ledger (fail closed):

- Mode decides the host. A forward-mode request (absolute form, ``POST http://h/p``) is
  matched with ``host=h`` and only against routes whose ``match.host`` is ``h``. A
  reverse-mode request (origin form, a path on the sidecar) is matched with ``host=None``
  and only against routes without ``match.host``. A hostless route is *not* "any host":
  it never claims forward traffic.
- Hosts compare case-insensitively, ignoring a trailing dot and a default port (``:80``
  and ``:443``); any other port must be equal.
- Methods compare upper-cased.
- Paths compare by segment, case-sensitively; the query string is not part of the path.
  Empty segments are ignored, so ``/v1/charges/`` and ``//v1/charges`` match
  ``/v1/charges``. A ``{name}`` segment matches exactly one non-empty segment;
  placeholders are whole segments only. The caller passes the decoded path (aiohttp's
  ``request.path``).
- Routes never overlap (the loader refuses it with ``routes_overlap``), so at most one
  route matches; for an unchecked route list the first in order wins.
"""

from __future__ import annotations

import re
from collections.abc import Iterable

from effect_broker.config.contracts import Route, RouteMatch

Pattern = tuple[str | None, ...]  # a literal segment, or None for a {placeholder}

SAFE_METHODS = frozenset({"GET", "HEAD", "OPTIONS", "TRACE"})
_DEFAULT_PORTS = frozenset({"80", "443"})
_PLACEHOLDER = re.compile(r"\{([A-Za-z_][A-Za-z0-9_]*)\}")
_LABEL = r"[a-z0-9](?:[a-z0-9-]{0,61}[a-z0-9])?"
_HOST = re.compile(
    rf"(?P<name>{_LABEL}(?:\.{_LABEL})*|\[[0-9a-f:.]+\])(?::(?P<port>[0-9]{{1,5}}))?"
)


def is_mutating(method: str) -> bool:
    """Whether strict mode must refuse this method when no route claims it."""
    return method.upper() not in SAFE_METHODS


def parse_path_pattern(pattern: str) -> Pattern:
    """Split a route path pattern into segments; ``ValueError`` says what is wrong."""
    if not pattern.startswith("/"):
        raise ValueError(f"{pattern!r} must start with '/'")
    if "?" in pattern or "#" in pattern:
        raise ValueError(
            f"{pattern!r}: the query is not matched; remove '?...' or '#...'"
        )
    segments: list[str | None] = []
    names: set[str] = set()
    for part in pattern.split("/"):
        if not part:
            continue
        placeholder = _PLACEHOLDER.fullmatch(part)
        if placeholder is not None:
            name = placeholder.group(1)
            if name in names:
                raise ValueError(f"{pattern!r}: placeholder {{{name}}} appears twice")
            names.add(name)
            segments.append(None)
        elif "{" in part or "}" in part:
            raise ValueError(
                f"{pattern!r}: segment {part!r} is not allowed; a placeholder is a whole "
                "segment named like an identifier, e.g. /v1/charges/{id}"
            )
        else:
            segments.append(part)
    return tuple(segments)


def split_path(path: str) -> tuple[str, ...]:
    return tuple(part for part in path.split("/") if part)


def parse_route_host(text: str) -> str:
    """Validate a ``match.host`` and return it normalized; ``ValueError`` says why not."""
    lowered = text.strip().lower().rstrip(".")
    found = _HOST.fullmatch(lowered)
    if found is None:
        raise ValueError(
            f"{text!r} is not a host name: write a bare host with an optional port, "
            "e.g. payments.internal or payments.internal:8443 (no scheme, no path)"
        )
    port = found.group("port")
    if port is not None and not 0 < int(port) < 65536:
        raise ValueError(f"{text!r}: port {port} is out of range")
    return normalize_host(lowered)


def normalize_host(host: str) -> str:
    """Lower case, no trailing dot, no default port: the form routes are indexed by."""
    lowered = host.strip().lower()
    if lowered.startswith("[") and "]" in lowered:
        end = lowered.index("]") + 1
        name, port = lowered[:end], lowered[end:].removeprefix(":")
    elif lowered.count(":") == 1:
        name, port = lowered.split(":")
    else:
        name, port = lowered, ""
    name = name.rstrip(".")
    if port.isdigit():
        port = str(int(port))
    if not port or port in _DEFAULT_PORTS:
        return name
    return f"{name}:{port}"


def _hostname(host: str) -> str:
    """The normalized host without any port, for decisions that must ignore ports."""
    normalized = normalize_host(host)
    if normalized.startswith("["):
        return normalized[: normalized.find("]") + 1]
    return normalized.split(":", 1)[0]


def _segments_match(pattern: Pattern, segments: tuple[str, ...]) -> bool:
    return all(
        want is None or want == got for want, got in zip(pattern, segments, strict=True)
    )


class RouteTable:
    """Routes indexed by (host, method, segment count), built once per routes file.

    Per request, matching is one dict lookup plus a scan of the (almost always single)
    candidate that shares host, method and path length.
    """

    __slots__ = ("_buckets", "_hostnames", "routes")

    def __init__(self, routes: Iterable[Route]) -> None:
        self.routes = tuple(routes)
        buckets: dict[tuple[str | None, str, int], list[tuple[Pattern, Route]]] = {}
        for route in self.routes:
            pattern = parse_path_pattern(route.match.path)
            host = (
                normalize_host(route.match.host) if route.match.host is not None else None
            )
            for method in sorted(route.match.methods):
                key = (host, method.upper(), len(pattern))
                buckets.setdefault(key, []).append((pattern, route))
        self._buckets = {key: tuple(found) for key, found in buckets.items()}
        self._hostnames = frozenset(
            _hostname(route.match.host) for route in self.routes if route.match.host
        )

    def match(self, *, method: str, host: str | None, path: str) -> Route | None:
        segments = split_path(path)
        key_host = normalize_host(host) if host is not None else None
        for pattern, route in self._buckets.get(
            (key_host, method.upper(), len(segments)), ()
        ):
            if _segments_match(pattern, segments):
                return route
        return None

    def is_guarded_host(self, host: str) -> bool:
        """Whether a route watches this host on any port: CONNECT to it must be refused.

        A tunnel hides method and path, so the safe answer ignores both and the port.
        """
        return _hostname(host) in self._hostnames


def match_route(
    source: RouteTable | Iterable[Route],
    *,
    method: str,
    host: str | None,
    path: str,
) -> Route | None:
    """The route owning this request, or None; ``host`` is None for reverse mode."""
    table = source if isinstance(source, RouteTable) else RouteTable(source)
    return table.match(method=method, host=host, path=path)


def overlap_witness(a: RouteMatch, b: RouteMatch) -> tuple[str, str | None, str] | None:
    """A concrete (method, host, path) both matches accept, or None if there is none."""
    methods = {m.upper() for m in a.methods} & {m.upper() for m in b.methods}
    host_a = normalize_host(a.host) if a.host is not None else None
    host_b = normalize_host(b.host) if b.host is not None else None
    if not methods or host_a != host_b:
        return None
    pattern_a, pattern_b = parse_path_pattern(a.path), parse_path_pattern(b.path)
    if len(pattern_a) != len(pattern_b):
        return None
    path: list[str] = []
    for seg_a, seg_b in zip(pattern_a, pattern_b, strict=True):
        if seg_a is not None and seg_b is not None and seg_a != seg_b:
            return None
        path.append(seg_a if seg_a is not None else seg_b if seg_b is not None else "x")
    return min(methods), host_a, "/" + "/".join(path)


def routes_overlap(a: RouteMatch, b: RouteMatch) -> bool:
    """Whether one request could match both: the loader refuses such pairs."""
    return overlap_witness(a, b) is not None
