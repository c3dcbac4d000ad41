"""Byte formats for what the ledger keeps: the request for redispatch, the receipt.

Both are sealed by ``crypto.Keyring`` before they reach the database. A small JSON head
carries method, URL or status and headers; the body follows as raw bytes, so a replay is
byte for byte what the target sent.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass

_VERSION = 1


@dataclass(frozen=True, slots=True)
class StoredRequest:
    """The client's request as the target must see it again (credentials excluded)."""

    method: str
    url: str
    headers: list[tuple[str, str]]
    body: bytes


@dataclass(frozen=True, slots=True)
class StoredResponse:
    status: int
    reason: str
    headers: list[tuple[str, str]]
    body: bytes


# Built once: ``json.dumps`` with arguments builds a new encoder for every call.
_HEAD_ENCODER = json.JSONEncoder(separators=(",", ":"))


def _pack(head: Mapping[str, object], body: bytes) -> bytes:
    return b"".join(_packed_parts(head, body))


def _packed_parts(head: Mapping[str, object], body: bytes) -> tuple[bytes, bytes]:
    """``_pack``'s bytes as the packed head and the body, not yet joined."""
    encoded = _HEAD_ENCODER.encode({"v": _VERSION, **head}).encode()
    return len(encoded).to_bytes(4, "big") + encoded, body


def _unpack(blob: bytes) -> tuple[dict[str, object], bytes]:
    size = int.from_bytes(blob[:4], "big")
    head = json.loads(blob[4 : 4 + size])
    if not isinstance(head, dict) or head.get("v") != _VERSION:
        raise ValueError("unknown stored message format")
    return head, blob[4 + size :]


def _header_pairs(value: object) -> list[tuple[str, str]]:
    if not isinstance(value, list):
        raise ValueError("stored headers must be a list")
    return [(str(name), str(text)) for name, text in value]


def encode_request(request: StoredRequest) -> bytes:
    head = {"method": request.method, "url": request.url, "headers": request.headers}
    return _pack(head, request.body)


def decode_request(blob: bytes) -> StoredRequest:
    head, body = _unpack(blob)
    return StoredRequest(
        method=str(head["method"]),
        url=str(head["url"]),
        headers=_header_pairs(head["headers"]),
        body=body,
    )


def encode_response(response: StoredResponse) -> bytes:
    return b"".join(encoded_response_parts(response))


def encoded_response_parts(response: StoredResponse) -> tuple[bytes, bytes]:
    """``encode_response`` as its packed head and the body, for a sealer that takes
    them apart (``Keyring.encrypt_parts``) instead of copying the body behind the head."""
    head = {
        "status": response.status,
        "reason": response.reason,
        "headers": response.headers,
    }
    return _packed_parts(head, response.body)


def decode_response(blob: bytes) -> StoredResponse:
    head, body = _unpack(blob)
    status = head["status"]
    if not isinstance(status, int):
        raise ValueError("stored status must be an integer")
    return StoredResponse(
        status=status,
        reason=str(head["reason"]),
        headers=_header_pairs(head["headers"]),
        body=body,
    )
