"""The validated routes.yaml, as frozen values.

The proxy pins a contract name and version into every effect it records, so these objects
must not change under it: every class is a frozen, slotted dataclass and every collection
is a tuple, a frozenset or a read-only mapping. Only ``config.routes_file`` builds them
from a file; it has already refused anything inconsistent, so consumers can trust
the invariants noted on each class without re-checking them.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from datetime import timedelta
from types import MappingProxyType
from typing import Literal, TypeVar
from urllib.parse import quote

from effect_broker.models import SafetyClass
from effect_broker.target.protocol import ATTEMPT_KEY_HEADER

DOWNSTREAM_KEY_PLACEHOLDER = "{downstream_key}"
DEFAULT_OPERATION_KEY_HEADER = "Operation-Key"
DEFAULT_TIMEOUT = timedelta(seconds=10)
DEFAULT_RETRY_LIMIT = 5
DEFAULT_OPERATION_KEY_ARGUMENT = "operation_key"
# The methods of the Streamable HTTP transport on its one endpoint.
MCP_METHODS = frozenset({"POST", "GET", "DELETE"})
#: Settled effects older than this leave the ledger (key_retention when that is longer).
DEFAULT_LEDGER_RETENTION = timedelta(days=7)

UnmatchedPolicy = Literal["pass", "reject-mutating"]
DuplicateAction = Literal["warn", "hold"]
# How the proxy's own refusals are written for a contract's clients (``dialects``).
ErrorDialect = Literal["problem", "stripe", "openai", "anthropic"]
ConnectPolicy = Literal["tunnel", "refuse"]
McpUnclassified = Literal["reject", "pass"]

K = TypeVar("K")
V = TypeVar("V")


def frozen_mapping(value: Mapping[K, V]) -> Mapping[K, V]:
    return value if isinstance(value, MappingProxyType) else MappingProxyType(dict(value))


@dataclass(frozen=True, slots=True)
class Probe:
    """An authoritative lookup by correlation key (reconcilable contracts only).

    Only the statuses listed here are conclusive; anything else, a timeout included, is
    "unknown" and never licenses a redispatch. ``path`` contains ``{downstream_key}``.
    """

    method: str
    path: str
    found_statuses: frozenset[int]
    absent_statuses: frozenset[int]
    external_id: str | None = None  # JSON pointer into a "found" body

    def path_for(self, downstream_key: str) -> str:
        """The probe path for one effect; the key is quoted so it stays one path item."""
        return self.path.replace(
            DOWNSTREAM_KEY_PLACEHOLDER, quote(downstream_key, safe="")
        )


DEFAULT_IN_FLIGHT_WAIT = timedelta(seconds=5)


@dataclass(frozen=True, slots=True)
class DuplicateGuard:
    """Suspect a new operation key whose payload equals a recent effect's on its route.

    A model that mints a fresh key per retry gets a new effect each time, which no
    ledger can stop by key alone; the same payload under a new key within ``window`` is
    the sign. ``warn`` counts and logs it; ``hold`` answers 409 ``suspected-duplicate``
    unless the client declares the repeat intentional (``Effect-Repeat: intentional``).
    """

    action: DuplicateAction
    window: timedelta


@dataclass(frozen=True, slots=True)
class Contract:
    """What a target promises, and so what the proxy may do after a lost response.

    Invariants from the loader: idempotent has ``idempotency_header`` and
    ``key_retention``; reconcilable has ``correlation_header``, ``probe`` and
    ``settlement_bound``; transactional has none of them (its key header is the
    protocol's); no contract carries a field its class does not use.
    """

    name: str
    version: str
    safety: SafetyClass
    idempotency_header: str | None = None
    correlation_header: str | None = None
    key_retention: timedelta | None = None
    settlement_bound: timedelta | None = None
    timeout: timedelta = DEFAULT_TIMEOUT
    retry_limit: int = DEFAULT_RETRY_LIMIT
    probe: Probe | None = None
    operation_key_header: str | None = None  # None: the route's or proxy's header
    # MCP only: the tool argument that carries the derived key instead of a header.
    idempotency_argument: str | None = None
    # How long a settled effect stays in the ledger; pruned after (store.prune_settled).
    ledger_retention: timedelta = DEFAULT_LEDGER_RETENTION
    # How long the lease outlasts the send window (engine.fence); None: the proxy's.
    lease_grace: timedelta | None = None
    # How long a duplicate waits for the request in flight before its 409.
    in_flight_wait: timedelta = DEFAULT_IN_FLIGHT_WAIT
    # None: off. Applies to HTTP routes (an MCP tool call is not checked).
    duplicate_guard: DuplicateGuard | None = None
    # A streamed answer (engine.stream): the longest gap between two of its bytes
    # before the outcome is unknown; None: ``timeout``. ``timeout`` then bounds only
    # the wait for the answer's head, so a stream that keeps flowing may run on.
    stream_idle_timeout: timedelta | None = None

    @property
    def idle_timeout(self) -> timedelta:
        """The longest silence a streamed answer may keep."""
        return self.stream_idle_timeout or self.timeout

    # The envelope the proxy's own refusals use, so the target's SDK can read them.
    error_dialect: ErrorDialect = "problem"

    @property
    def downstream_header(self) -> str | None:
        """The header that carries the derived downstream key, or None (unsafe).

        A transactional target gets the key of the attempt instead (one per attempt,
        derived from the downstream key), in the header its kit reads.
        """
        if self.safety is SafetyClass.IDEMPOTENT:
            return self.idempotency_header
        if self.safety is SafetyClass.RECONCILABLE:
            return self.correlation_header
        if self.safety is SafetyClass.TRANSACTIONAL:
            return ATTEMPT_KEY_HEADER
        return None

    @property
    def ref(self) -> str:
        return f"{self.name}@{self.version}"


@dataclass(frozen=True, slots=True)
class RouteMatch:
    """Which requests a route owns; see ``config.routing`` for the exact rules.

    ``methods`` are upper case; ``host`` is normalized (lower case, no default port) and
    None means reverse mode (a path on the sidecar itself), not "any host". ``aliases``
    are further hosts (same form) the route also watches; only forward routes have them.
    """

    methods: frozenset[str]
    host: str | None
    path: str
    aliases: frozenset[str] = frozenset()


@dataclass(frozen=True, slots=True)
class McpTools:
    """How an MCP route classifies ``tools/call``: by configured name only.

    ``tools`` maps each mutating tool to its contract; ``read_only`` tools pass through
    unrecorded; any other tool is refused (``reject``) or passed through (``pass``).
    """

    tools: Mapping[str, Contract]
    read_only: frozenset[str] = frozenset()
    unclassified: McpUnclassified = "reject"
    operation_key_argument: str = DEFAULT_OPERATION_KEY_ARGUMENT

    def __post_init__(self) -> None:
        object.__setattr__(self, "tools", frozen_mapping(self.tools))


# The ``contract`` of an MCP route itself: it records nothing under it (each tool call
# is recorded under its tool's contract), and should anything ever use it, "unsafe"
# is the class that can never cause a resend. Its name is not a valid contract name.
MCP_ROUTE_CONTRACT = Contract(name="(mcp)", version="0", safety=SafetyClass.UNSAFE)


@dataclass(frozen=True, slots=True)
class Route:
    """One matched family of requests, bound to its resolved contract.

    ``inject_headers`` holds templates such as ``Bearer ${env:STRIPE_SECRET_KEY}``, never
    secret values: ``routes_file.resolve_inject_headers`` resolves them at start.
    """

    name: str
    match: RouteMatch
    contract: Contract
    upstream: str | None = None
    strip_prefix: str | None = None
    inject_headers: Mapping[str, str] = field(
        default_factory=lambda: MappingProxyType({})
    )
    operation_key_header: str = DEFAULT_OPERATION_KEY_HEADER
    source: str = "<config>"
    line: int | None = None
    mcp: McpTools | None = None  # set: an MCP endpoint, ``contract`` is a placeholder
    # Unrecorded requests under this route's prefix (reverse) or to its host (forward)
    # go on unrecorded; False refuses them (see ``proxy.prefixes``).
    passthrough: bool = True

    def __post_init__(self) -> None:
        object.__setattr__(self, "inject_headers", frozen_mapping(self.inject_headers))

    def bound(self, contract: Contract) -> Route:
        """This route governed by one of its tools' contracts (MCP), as recorded."""
        return replace(self, contract=contract)

    def bound_routes(self) -> tuple[Route, ...]:
        """Every (route, contract) pair an effect on this route may be pinned to."""
        if self.mcp is None:
            return (self,)
        unique = {contract.ref: contract for contract in self.mcp.tools.values()}
        return tuple(self.bound(contract) for contract in unique.values())

    @property
    def mode(self) -> Literal["forward", "reverse"]:
        return "reverse" if self.match.host is None else "forward"
