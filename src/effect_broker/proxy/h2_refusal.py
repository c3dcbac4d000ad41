"""HTTP/2 with prior knowledge, refused in HTTP/2's own words.

A client that starts HTTP/2 without negotiation (``curl --http2-prior-knowledge``, gRPC
over cleartext) opens with the connection preface ``PRI * HTTP/2.0``. The proxy speaks
HTTP/1.1 only: an HTTP/1.1 error would be gibberish to such a client ("empty reply"),
so it gets a SETTINGS frame and a GOAWAY with ``HTTP_1_1_REQUIRED`` (RFC 9113 7), which
clients report as "HTTP/1.1 required", with a reason in the debug data.
"""

from __future__ import annotations

import struct

PREFACE = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n"
HTTP_1_1_REQUIRED = 0xD
SETTINGS, GOAWAY = 0x4, 0x7
REASON = b"effect-broker speaks HTTP/1.1 only: send HTTP/1.1 to this proxy"


def frame(kind: int, payload: bytes) -> bytes:
    """One HTTP/2 frame on stream 0 with no flags."""
    return struct.pack(">I", len(payload))[1:] + bytes([kind, 0]) + b"\0\0\0\0" + payload


def refusal() -> bytes:
    """The server preface (empty SETTINGS) and a GOAWAY: HTTP/1.1 required."""
    goaway = struct.pack(">II", 0, HTTP_1_1_REQUIRED) + REASON
    return frame(SETTINGS, b"") + frame(GOAWAY, goaway)


def may_be_preface(buffer: bytes) -> bool:
    """Whether ``buffer`` is still the beginning of the preface (more bytes decide)."""
    return PREFACE.startswith(buffer[: len(PREFACE)])
