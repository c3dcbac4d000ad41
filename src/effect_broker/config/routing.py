"""Which route owns a request: pure matching, no I/O.

The rules, chosen so that a trivially different spelling of a protected request cannot
slip past the ledger (fail closed):

- Mode decides the host. A forward-mode request (absolute form, ``POST http://h/p``) is
  matched with ``host=h`` and only against routes whose ``match.host`` is ``h``. A
  reverse-mode request (origin form, a path on the sidecar) is matched with ``host=None``
  and only against routes without ``match.host``. A hostless route is *not* "any host":
  it never claims forward traffic.
- Hosts compare by their canonical identity (``config.hosts``): case, a trailing dot,
  every IPv4 spelling, IPv4-mapped IPv6 and the whole loopback range fold together, and
  a default port (``:80`` and ``:443``) is dropped; any other port must be equal. A
  route's ``aliases`` are further hosts it watches, compared the same way.
- Methods compare upper-cased.
- Paths compare by segment, case-sensitively; the query string is not part of the path.
  Empty segments are ignored, so ``/v1/charges/`` and ``//v1/charges`` match
  ``/v1/charges``. A ``{name}`` segment matches exactly one non-empty segment;
  placeholders are whole segments only, and never match a dot segment (``.``, ``..``).
  The caller passes the decoded text of ``config.paths.normalize_path``, which has
  already refused dot segments and hidden separators.
- Routes never overlap (the loader refuses it with ``routes_overlap``), so at most one
  route matches; for an unchecked route list the first in order wins.
"""

from __future__ import annotations

import re
from collections.abc import Iterable

from effect_broker.config.contracts import Route, RouteMatch
from effect_broker.config.hosts import host_key, route_key
from effect_broker.config.paths import is_dot_segment

Pattern = tuple[str | None, ...]  # a literal segment, or None for a {placeholder}

SAFE_METHODS = frozenset({"GET", "HEAD", "OPTIONS", "TRACE"})
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
    return route_key(lowered)


def normalize_host(host: str) -> str:
    """The canonical ``host[:port]`` routes are indexed by (see ``config.hosts``)."""
    return route_key(host)


def route_hosts(match: RouteMatch) -> frozenset[str]:
    """Every canonical host a forward route watches: its host and its aliases."""
    if match.host is None:
        return frozenset()
    return frozenset({route_key(match.host), *(route_key(a) for a in match.aliases)})


def _segments_match(pattern: Pattern, segments: tuple[str, ...]) -> bool:
    return all(
        got == want if want is not None else not is_dot_segment(got)
        for want, got in zip(pattern, segments, strict=True)
    )


#: (method, host, path) answers a table remembers before it starts over, and the
#: longest host and path it remembers one for: memory stays under a few MiB.
REMEMBERED_ANSWERS = 4096
REMEMBERED_LENGTH = 256


class RouteTable:
    """Routes indexed by (host, method, segment count), built once per routes file.

    Per request, matching is one dict lookup plus a scan of the (almost always single)
    candidate that shares host, method and path length. Answers are remembered per
    (method, host, path) as given, since agents call the same few endpoints again and
    again; the memory is bounded and starts over when full (never stale: the table is
    immutable, a new routes file builds a new one).
    """

    __slots__ = (
        "_answers",
        "_buckets",
        "_hostnames",
        "_watchers_of",
        "_watching",
        "routes",
    )

    def __init__(self, routes: Iterable[Route]) -> None:
        self.routes = tuple(routes)
        buckets: dict[tuple[str | None, str, int], list[tuple[Pattern, Route]]] = {}
        for route in self.routes:
            pattern = parse_path_pattern(route.match.path)
            hosts: frozenset[str | None] = route_hosts(route.match) or frozenset({None})
            for host in sorted(hosts, key=str):
                for method in sorted(route.match.methods):
                    key = (host, method.upper(), len(pattern))
                    buckets.setdefault(key, []).append((pattern, route))
        self._buckets = {key: tuple(found) for key, found in buckets.items()}
        self._hostnames = frozenset(
            host_key(host) for route in self.routes for host in route_hosts(route.match)
        )
        self._answers: dict[tuple[str, str | None, str], Route | None] = {}
        watching: dict[str, list[Route]] = {}
        for route in self.routes:
            for host in sorted(route_hosts(route.match)):
                watching.setdefault(host, []).append(route)
        self._watching = {host: tuple(found) for host, found in watching.items()}
        #: ``watching`` per authority as written: agents send to the same few.
        self._watchers_of: dict[str, tuple[Route, ...]] = {}

    def match(self, *, method: str, host: str | None, path: str) -> Route | None:
        if len(path) + len(host or "") > REMEMBERED_LENGTH:
            return self._match(method=method, host=host, path=path)
        asked = (method, host, path)
        try:
            return self._answers[asked]
        except KeyError:
            pass
        found = self._match(method=method, host=host, path=path)
        if len(self._answers) >= REMEMBERED_ANSWERS:
            self._answers.clear()
        self._answers[asked] = found
        return found

    def _match(self, *, method: str, host: str | None, path: str) -> Route | None:
        segments = split_path(path)
        key_host = normalize_host(host) if host is not None else None
        for pattern, route in self._buckets.get(
            (key_host, method.upper(), len(segments)), ()
        ):
            if _segments_match(pattern, segments):
                return route
        return None

    def watching(self, host: str) -> tuple[Route, ...]:
        """The forward routes watching ``host`` (any spelling of it, port included),
        in the routes file's order; none for an authority that cannot be read."""
        try:
            return self._watchers_of[host]
        except KeyError:
            pass
        try:
            found = self._watching.get(route_key(host), ())
        except ValueError:
            found = ()
        if len(host) <= REMEMBERED_LENGTH:
            if len(self._watchers_of) >= REMEMBERED_ANSWERS:
                self._watchers_of.clear()
            self._watchers_of[host] = found
        return found

    def is_guarded_host(self, host: str) -> bool:
        """Whether a route watches this host on any port: CONNECT to it must be refused.

        A tunnel hides method and path, so the safe answer ignores both and the port;
        every spelling of a watched host (or of an alias) is the same host here.
        """
        try:
            return host_key(host) in self._hostnames
        except ValueError:
            return True  # an authority that cannot be read is refused, never tunnelled


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
    hosts_a, hosts_b = route_hosts(a), route_hosts(b)
    if (a.host is None) != (b.host is None):
        return None
    shared = hosts_a & hosts_b
    if not methods or (a.host is not None and not shared):
        return None
    host = min(shared) if shared else None
    pattern_a, pattern_b = parse_path_pattern(a.path), parse_path_pattern(b.path)
    if len(pattern_a) != len(pattern_b):
        return None
    path: list[str] = []
    for seg_a, seg_b in zip(pattern_a, pattern_b, strict=True):
        if seg_a is not None and seg_b is not None and seg_a != seg_b:
            return None
        path.append(seg_a if seg_a is not None else seg_b if seg_b is not None else "x")
    return min(methods), host, "/" + "/".join(path)


def routes_overlap(a: RouteMatch, b: RouteMatch) -> bool:
    """Whether one request could match both: the loader refuses such pairs."""
    return overlap_witness(a, b) is not None
