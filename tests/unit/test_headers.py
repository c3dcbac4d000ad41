"""Which headers cross the proxy: hop-by-hop ones and those ``Connection`` names never
do; order, case and repeated names of the rest are kept."""

from __future__ import annotations

from effect_broker.headers import (
    end_to_end,
    passthrough_request_headers,
    response_headers,
)

INCOMING = [
    ("Host", "api.example"),
    ("Connection", "keep-alive, X-Private"),
    ("X-Private", "hop"),
    ("Keep-Alive", "timeout=5"),
    ("Accept", "a"),
    ("Content-Length", "12"),
    ("accept", "b"),
    ("Transfer-Encoding", "chunked"),
    ("Proxy-Authorization", "Basic eA=="),
    ("Set-Cookie", "a=1"),
    ("Set-Cookie", "b=2"),
]


def test_end_to_end_drops_hop_by_hop_and_what_connection_names() -> None:
    assert end_to_end(INCOMING) == [
        ("Host", "api.example"),
        ("Accept", "a"),
        ("Content-Length", "12"),
        ("accept", "b"),
        ("Set-Cookie", "a=1"),
        ("Set-Cookie", "b=2"),
    ]


def test_a_token_is_dropped_only_when_a_connection_header_names_it() -> None:
    plain = [("X-Private", "kept"), ("CONNECTION", "x-private"), ("Accept", "a")]
    assert end_to_end(plain) == [("Accept", "a")]
    assert end_to_end([("X-Private", "kept")]) == [("X-Private", "kept")]


def test_pass_through_leaves_host_and_length_to_the_client() -> None:
    assert passthrough_request_headers(iter(INCOMING)) == [
        ("Accept", "a"),
        ("accept", "b"),
        ("Set-Cookie", "a=1"),
        ("Set-Cookie", "b=2"),
    ]


def test_a_response_keeps_all_but_its_length() -> None:
    assert response_headers(INCOMING) == [
        ("Host", "api.example"),
        ("Accept", "a"),
        ("accept", "b"),
        ("Set-Cookie", "a=1"),
        ("Set-Cookie", "b=2"),
    ]
