"""The pure parts of recorded streams: which answers stream, and the receipt's copy."""

from __future__ import annotations

import base64
import hashlib

import pytest

from effect_broker.engine.stream import ReceiptCopy, streams_live


@pytest.mark.parametrize(
    ("method", "status", "length", "expected"),
    [
        ("POST", 200, None, True),  # chunked or close-delimited
        ("POST", 500, None, True),  # an error body of unknown length streams too
        ("POST", 200, 12, False),  # sized: read whole
        ("POST", 200, 0, False),
        ("HEAD", 200, None, False),  # no body, whatever the headers say
        ("POST", 204, None, False),
        ("POST", 304, None, False),
        ("POST", 101, None, False),
    ],
)
def test_only_bodies_of_unknown_length_stream(
    method: str, status: int, length: int | None, expected: bool
) -> None:
    assert streams_live(method, status, length) is expected


def test_a_copy_within_the_limit_keeps_every_byte() -> None:
    copy = ReceiptCopy(limit=10)
    for chunk in (b"abc", b"defg", b"hij"):
        copy.add(chunk)
    assert (copy.body, copy.length, copy.omitted) == (b"abcdefghij", 10, False)


def test_a_copy_past_the_limit_keeps_only_length_and_digest() -> None:
    copy = ReceiptCopy(limit=4)
    for chunk in (b"abc", b"defg", b"hij"):
        copy.add(chunk)
    digest = base64.b64encode(hashlib.sha256(b"abcdefghij").digest()).decode()
    assert (copy.body, copy.length, copy.omitted) == (b"", 10, True)
    assert copy.digest == f"sha-256=:{digest}:"
