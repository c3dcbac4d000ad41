"""Route matching: a table of requests, and properties of the overlap check."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from effect_broker.config.contracts import Route, RouteMatch
from effect_broker.config.routes_config import ProxyPolicy, RoutesConfig
from effect_broker.config.routing import (
    REMEMBERED_ANSWERS,
    REMEMBERED_LENGTH,
    RouteTable,
    is_mutating,
    match_route,
    normalize_host,
    overlap_witness,
    parse_path_pattern,
    routes_overlap,
)
from tests.unit.routes_support import CONTRACT


def route(name: str, methods: str, host: str | None, path: str) -> Route:
    match = RouteMatch(methods=frozenset(methods.split(",")), host=host, path=path)
    return Route(name=name, match=match, contract=CONTRACT, upstream="http://up")


TABLE = RouteTable(
    [
        route("charge", "POST", "payments.internal", "/v1/charges"),
        route("capture", "POST,PUT", "payments.internal", "/v1/charges/{id}/capture"),
        route("alt-port", "POST", "payments.internal:8443", "/v1/charges"),
        route("ipv6", "POST", "[::1]", "/v1/charges"),
        route("stripe", "POST", None, "/stripe/v1/charges"),
        route("root", "DELETE", None, "/"),
    ]
)


@pytest.mark.parametrize(
    ("method", "host", "path", "expected"),
    [
        ("POST", "payments.internal", "/v1/charges", "charge"),
        ("post", "PAYMENTS.Internal", "/v1/charges", "charge"),
        ("POST", "payments.internal:80", "/v1/charges", "charge"),
        ("POST", "payments.internal:443", "/v1/charges", "charge"),
        ("POST", "payments.internal.", "/v1/charges", "charge"),
        ("POST", "payments.internal", "/v1/charges/", "charge"),
        ("POST", "payments.internal", "//v1//charges", "charge"),
        ("POST", "payments.internal:8443", "/v1/charges", "alt-port"),
        ("POST", "payments.internal:8080", "/v1/charges", None),
        ("POST", "[::1]:80", "/v1/charges", "ipv6"),
        ("GET", "payments.internal", "/v1/charges", None),
        ("POST", "payments.internal", "/v1/Charges", None),
        ("POST", "payments.internal", "/v1/charges/extra", None),
        ("POST", "other.internal", "/v1/charges", None),
        ("PUT", "payments.internal", "/v1/charges/ch_1/capture", "capture"),
        ("POST", "payments.internal", "/v1/charges/ch_1/capture/", "capture"),
        ("POST", "payments.internal", "/v1/charges//capture", None),
        ("POST", "payments.internal", "/v1/charges/capture", None),
        ("POST", None, "/stripe/v1/charges", "stripe"),
        ("POST", "payments.internal", "/stripe/v1/charges", None),
        ("POST", None, "/v1/charges", None),
        ("DELETE", None, "/", "root"),
        ("DELETE", None, "", "root"),
        ("DELETE", None, "/x", None),
    ],
)
def test_match_table(
    method: str, host: str | None, path: str, expected: str | None
) -> None:
    found = TABLE.match(method=method, host=host, path=path)
    assert (found.name if found else None) == expected


def test_a_table_answers_again_from_memory_within_its_bound() -> None:
    table = RouteTable(TABLE.routes)
    asked = [
        ("POST", "payments.internal", "/v1/charges"),
        ("GET", "payments.internal", "/v1/charges"),
        ("post", "PAYMENTS.Internal", "/v1/charges"),
    ]
    first = [table.match(method=m, host=h, path=p) for m, h, p in asked]
    again = [table.match(method=m, host=h, path=p) for m, h, p in asked]
    assert again == first
    assert [found.name if found else None for found in first] == [
        "charge",
        None,
        "charge",
    ]
    for n in range(2 * REMEMBERED_ANSWERS):  # ids in paths: every request is new
        found = table.match(
            method="PUT", host="payments.internal", path=f"/v1/charges/ch_{n}/capture"
        )
        assert found is not None and found.name == "capture"
        assert len(table._answers) <= REMEMBERED_ANSWERS  # memory stays bounded
    long_path = "/v1/charges/" + "c" * REMEMBERED_LENGTH + "/capture"
    found = table.match(method="PUT", host="payments.internal", path=long_path)
    assert found is not None and found.name == "capture"
    assert ("PUT", "payments.internal", long_path) not in table._answers


def test_the_routes_watching_a_host_are_remembered_within_their_bound() -> None:
    table = RouteTable(TABLE.routes)
    spellings = ["payments.internal", "PAYMENTS.Internal:80", "payments.internal:8443"]
    first = [[r.name for r in table.watching(host)] for host in spellings]
    again = [[r.name for r in table.watching(host)] for host in spellings]
    assert (
        again
        == first
        == [
            ["charge", "capture"],
            ["charge", "capture"],
            ["alt-port"],
        ]
    )
    assert table.watching("bad:port") == () == table.watching("bad:port")
    for n in range(2 * REMEMBERED_ANSWERS):  # every host new: memory stays bounded
        assert table.watching(f"h{n}.example") == ()
        assert len(table._watchers_of) <= REMEMBERED_ANSWERS
    long_host = "h" * REMEMBERED_LENGTH + ".example"
    assert table.watching(long_host) == ()
    assert long_host not in table._watchers_of


def test_match_route_accepts_a_table_or_routes() -> None:
    routes = TABLE.routes
    config = RoutesConfig(
        version=1, proxy=ProxyPolicy(), contracts={"c": CONTRACT}, routes=routes
    )
    for source in (config.table, TABLE, list(routes)):
        found = match_route(source, method="POST", host=None, path="/stripe/v1/charges")
        assert found is not None and found.name == "stripe"
    assert config.table.match(method="POST", host=None, path="/nope") is None


def test_connect_guard_ignores_the_port() -> None:
    assert TABLE.is_guarded_host("payments.internal:443")
    assert TABLE.is_guarded_host("Payments.Internal:9999")
    assert TABLE.is_guarded_host("[::1]:443")
    assert not TABLE.is_guarded_host("other.internal:443")


@pytest.mark.parametrize(
    ("method", "mutating"),
    [("POST", True), ("delete", True), ("GET", False), ("head", False)],
)
def test_is_mutating(method: str, mutating: bool) -> None:
    assert is_mutating(method) is mutating


@pytest.mark.parametrize(
    ("host", "normalized"),
    [
        ("A.Example:80", "a.example"),
        ("a.example:0443", "a.example"),
        ("a.example:8080", "a.example:8080"),
        ("[::1]:443", "localhost"),
        ("[::1]:8080", "localhost:8080"),
        ("[2001:DB8::1]:8080", "[2001:db8::1]:8080"),
        ("0x7f000001:19000", "localhost:19000"),
        ("10.1:80", "10.0.0.1"),
    ],
)
def test_normalize_host(host: str, normalized: str) -> None:
    assert normalize_host(host) == normalized


LOOPBACK_TABLE = RouteTable(
    [
        route("watched", "POST", "127.0.0.1:19000", "/v1/charges"),
        route("aliased", "POST", "pay.internal", "/v1/pay"),
    ]
)
LOOPBACK_SPELLINGS = [
    "127.0.0.1:19000",
    "localhost:19000",
    "LOCALHOST.:19000",
    "0x7f000001:19000",
    "2130706433:19000",
    "127.1:19000",
    "0177.0.0.1:19000",
    "[::ffff:127.0.0.1]:19000",
    "[::1]:19000",
    "127.0.0.2:19000",
    "app.localhost:19000",
]


@pytest.mark.parametrize("host", LOOPBACK_SPELLINGS)
def test_every_spelling_of_a_watched_loopback_host_matches_its_route(host: str) -> None:
    found = LOOPBACK_TABLE.match(method="POST", host=host, path="/v1/charges")
    assert found is not None and found.name == "watched"
    assert LOOPBACK_TABLE.is_guarded_host(host)
    assert LOOPBACK_TABLE.is_guarded_host(host.rsplit(":", 1)[0] + ":5432")


def test_aliases_are_matched_and_guarded_like_the_host() -> None:
    match = RouteMatch(
        methods=frozenset({"POST"}),
        host="payments.internal",
        path="/v1/charges",
        aliases=frozenset({"pay.example", "10.0.0.7:8443"}),
    )
    table = RouteTable(
        [Route(name="r", match=match, contract=CONTRACT, upstream="http://up")]
    )
    for host in ("payments.internal", "PAY.example.", "10.0.0.7:8443", "0xa000007:8443"):
        found = table.match(method="POST", host=host, path="/v1/charges")
        assert found is not None, host
        assert table.is_guarded_host(host)
    assert table.match(method="POST", host="10.0.0.7", path="/v1/charges") is None
    assert not table.is_guarded_host("pay.example.com:443")


def test_routes_overlap_through_an_alias() -> None:
    a = RouteMatch(frozenset({"POST"}), "a.internal", "/x", frozenset({"b.internal"}))
    b = RouteMatch(frozenset({"POST"}), "B.internal.", "/x")
    assert overlap_witness(a, b) == ("POST", "b.internal", "/x")
    assert routes_overlap(b, a)


@pytest.mark.parametrize("segment", [".", "..", "..;x"])
def test_a_placeholder_never_matches_a_dot_segment(segment: str) -> None:
    table = RouteTable([route("one", "POST", None, "/items/{id}")])
    assert table.match(method="POST", host=None, path=f"/items/{segment}") is None
    assert table.match(method="POST", host=None, path="/items/x") is not None


def test_parse_path_pattern() -> None:
    assert parse_path_pattern("/v1/charges/{id}/") == ("v1", "charges", None)
    assert parse_path_pattern("/") == ()
    with pytest.raises(ValueError, match="whole segment"):
        parse_path_pattern("/v1/{id")


def match_of(methods: str, host: str | None, path: str) -> RouteMatch:
    return RouteMatch(methods=frozenset(methods.split(",")), host=host, path=path)


@pytest.mark.parametrize(
    ("a", "b", "overlap"),
    [
        (match_of("POST", "h", "/a/{x}"), match_of("POST", "H:80", "/{y}/b"), True),
        (match_of("POST", "h", "/a/{x}"), match_of("PUT", "h", "/a/b"), False),
        (match_of("POST", "h", "/a/{x}"), match_of("POST", "h:8080", "/a/b"), False),
        (match_of("POST", "h", "/a/{x}"), match_of("POST", None, "/a/b"), False),
        (match_of("POST", "h", "/a/{x}"), match_of("POST", "h", "/a/b/c"), False),
        (match_of("POST", "h", "/a/b"), match_of("POST", "h", "/a/c"), False),
        (match_of("GET,POST", None, "/a/"), match_of("POST,PUT", None, "/a"), True),
    ],
)
def test_routes_overlap_examples(a: RouteMatch, b: RouteMatch, overlap: bool) -> None:
    assert routes_overlap(a, b) is overlap


# --- properties ---

SEGMENTS = ("a", "b", "c")
METHODS = ("GET", "POST", "PUT")
ROUTE_HOSTS = (None, "h", "H:80", "h:8080")
REQUEST_HOSTS = (None, "h", "h:443", "h:8080", "other")


@st.composite
def route_matches(draw: st.DrawFn) -> RouteMatch:
    methods = draw(st.frozensets(st.sampled_from(METHODS), min_size=1))
    host = draw(st.sampled_from(ROUTE_HOSTS))
    parts = draw(st.lists(st.sampled_from((*SEGMENTS, None)), max_size=3))
    path = "/" + "/".join(part or f"{{p{i}}}" for i, part in enumerate(parts))
    return RouteMatch(methods=methods, host=host, path=path)


@st.composite
def requests(draw: st.DrawFn) -> tuple[str, str | None, str]:
    parts = draw(st.lists(st.sampled_from(SEGMENTS), max_size=3))
    slash = draw(st.sampled_from(("", "/")))
    method = draw(st.sampled_from(METHODS))
    return method, draw(st.sampled_from(REQUEST_HOSTS)), "/" + "/".join(parts) + slash


def accepts(match: RouteMatch, request: tuple[str, str | None, str]) -> bool:
    method, host, path = request
    single = Route(name="r", match=match, contract=CONTRACT)
    return match_route([single], method=method, host=host, path=path) is not None


@given(route_matches(), route_matches(), requests())
def test_overlap_is_sound(
    a: RouteMatch, b: RouteMatch, request: tuple[str, str | None, str]
) -> None:
    if accepts(a, request) and accepts(b, request):
        assert routes_overlap(a, b)


@given(requests(), st.data())
def test_overlap_is_sound_for_patterns_built_from_one_request(
    request: tuple[str, str | None, str], data: st.DataObject
) -> None:
    """Two patterns derived from one request both match it: the case that counts."""
    method, host, path = request
    segments = [part for part in path.split("/") if part]

    def derived() -> RouteMatch:
        holes = data.draw(
            st.lists(st.booleans(), min_size=len(segments), max_size=len(segments))
        )
        parts = [
            f"{{p{i}}}" if hole else seg
            for i, (seg, hole) in enumerate(zip(segments, holes, strict=True))
        ]
        extra = data.draw(st.frozensets(st.sampled_from(METHODS)))
        return RouteMatch(methods=extra | {method}, host=host, path="/" + "/".join(parts))

    a, b = derived(), derived()
    assert accepts(a, request) and accepts(b, request)
    assert routes_overlap(a, b)


@given(route_matches(), route_matches())
def test_overlap_is_symmetric_and_its_witness_matches_both(
    a: RouteMatch, b: RouteMatch
) -> None:
    assert routes_overlap(a, b) == routes_overlap(b, a)
    witness = overlap_witness(a, b)
    if witness is not None:
        assert accepts(a, witness) and accepts(b, witness)
