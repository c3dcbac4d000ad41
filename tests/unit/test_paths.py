"""Path normalisation: what is matched is what is stripped and forwarded (pure)."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from effect_broker.config.contracts import Route, RouteMatch
from effect_broker.config.paths import UNRESERVED, normalize_path, split_target
from effect_broker.config.routing import RouteTable
from effect_broker.engine.targets import upstream_url
from effect_broker.errors import MalformedRequest
from tests.unit.routes_support import CONTRACT

segment_text = st.text(alphabet=sorted(UNRESERVED), min_size=1, max_size=8).filter(
    lambda s: s not in (".", "..")
)


def encode_some(segment: str, flags: list[bool]) -> str:
    return (
        "".join(
            f"%{ord(c):02x}" if flag else c
            for c, flag in zip(segment, flags, strict=False)
        )
        + segment[len(flags) :]
    )


@given(st.lists(segment_text, max_size=5), st.data())
def test_escapes_of_unreserved_characters_and_empty_segments_are_one_path(
    segments: list[str], data: st.DataObject
) -> None:
    spelled = [
        encode_some(s, data.draw(st.lists(st.booleans(), max_size=len(s))))
        for s in segments
    ]
    raw = "/" + "//".join(spelled) + data.draw(st.sampled_from(["", "/", "//"]))
    path = normalize_path(raw)
    assert path.forwarded == path.text == "/" + "/".join(segments)


@pytest.mark.parametrize(
    "raw",
    [
        "/a/../b",
        "/a/./b",
        "/a/%2e%2e/b",
        "/a/%2E%2e",
        "/a/.%2e",
        "/a/..;x/b",
        "/a%2fb",
        "/a/b%2F",
        "/a%5cb",
        "/a\\b",
        "/a#b",
    ],
)
def test_hidden_structure_is_refused(raw: str) -> None:
    with pytest.raises(MalformedRequest):
        normalize_path(raw)


def test_other_escapes_are_kept_upper_case_and_matched_decoded() -> None:
    path = normalize_path("/v1/items%3abatch/caf%c3%a9")
    assert path.forwarded == "/v1/items%3Abatch/caf%C3%A9"
    assert path.text == "/v1/items:batch/café"


def test_split_target() -> None:
    assert split_target("/a/b?x=1") == ("/a/b", "x=1")
    assert split_target("http://h:1/a?x") == ("/a", "x")
    assert split_target("HTTP://h") == ("/", "")
    assert split_target("http://h?q") == ("/", "q")


ECHO = Route(
    name="echo",
    match=RouteMatch(frozenset({"POST"}), None, "/echo/api/{item}"),
    contract=CONTRACT,
    upstream="http://up/inner",
    strip_prefix="/echo",
)


@pytest.mark.parametrize(
    "raw", ["/echo/api/x", "/%65cho/api/x", "//echo/api/x", "/echo//api/%78/"]
)
def test_a_matched_path_is_stripped_and_forwarded_in_the_form_it_was_matched(
    raw: str,
) -> None:
    path = normalize_path(raw)
    assert RouteTable([ECHO]).match(method="POST", host=None, path=path.text) is ECHO
    url = upstream_url(ECHO, origin=None, path=path, raw_query="q=1")
    assert url == "http://up/inner/api/x?q=1"
