"""The stored message format: a length-prefixed compact JSON head, then the raw body.

Blobs written by any earlier build must keep opening, so the bytes are pinned here."""

from __future__ import annotations

from effect_broker.engine.messages import (
    StoredRequest,
    StoredResponse,
    decode_request,
    decode_response,
    encode_request,
    encode_response,
    encoded_response_parts,
)


def _framed(head: bytes, body: bytes) -> bytes:
    return len(head).to_bytes(4, "big") + head + body


def test_a_response_is_written_byte_for_byte_as_before() -> None:
    response = StoredResponse(
        201, "Créé", [("Content-Type", "application/json"), ("X-A", "é")], b"\x00{}"
    )
    head = (
        b'{"v":1,"status":201,"reason":"Cr\\u00e9\\u00e9","headers":'
        b'[["Content-Type","application/json"],["X-A","\\u00e9"]]}'
    )
    assert encode_response(response) == _framed(head, b"\x00{}")
    assert decode_response(encode_response(response)) == response


def test_a_request_is_written_byte_for_byte_as_before() -> None:
    request = StoredRequest("POST", "http://t/pay?a=1", [("Idempotency-Key", "k")], b"")
    head = (
        b'{"v":1,"method":"POST","url":"http://t/pay?a=1",'
        b'"headers":[["Idempotency-Key","k"]]}'
    )
    assert encode_request(request) == _framed(head, b"")
    assert decode_request(encode_request(request)) == request


def test_a_response_in_parts_is_its_encoding_split_before_the_body() -> None:
    response = StoredResponse(200, "OK", [("Content-Type", "text/plain")], b"body")
    head, body = encoded_response_parts(response)
    assert body is response.body  # not copied
    assert head + body == encode_response(response)
