"""The wire protocol between the proxy and a target running the kit (pure, stdlib only).

A ``transactional`` target stores, in the same transaction as its mutation, a receipt
row under the *attempt key* the proxy sent with that attempt. Its table has one unique
key per attempt key, and a *tombstone* is a row under that same key. So exactly one of
two commits can ever succeed for an attempt key: the attempt's (mutation + receipt) or
the tombstone's. When the proxy has lost an attempt's answer it asks the target:

* ``GET  /.well-known/effect-broker/attempts/{attempt_key}`` (lookup), then, if the
  attempt is absent,
* ``PUT  /.well-known/effect-broker/attempts/{attempt_key}/tombstone``.

A tombstone that commits proves the attempt never will: only then does the proxy send the
next attempt, under the next attempt key. A tombstone refused because the attempt's row
is there carries that attempt's receipt instead.

Both endpoints demand the shared secret in ``Effect-Broker-Secret`` (the route's
``inject_headers`` send it, resolved from the environment). Every answer of the kit is
JSON with ``"protocol": "effect-broker-target/1"``; an answer without it (a plain 404 from
a server that does not run the kit, a proxy's error page) proves nothing, and the proxy
treats it as "unknown", never as "absent".

This module is shared by the proxy (``engine``) and the kit (``target``): the paths,
headers and documents are defined once, here.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any

PROTOCOL = "effect-broker-target/1"
#: The header that carries an attempt's key on the mutating request itself.
ATTEMPT_KEY_HEADER = "Effect-Attempt-Key"
#: The header that carries the shared secret on lookup and tombstone requests.
SECRET_HEADER = "Effect-Broker-Secret"
WELL_KNOWN_PREFIX = "/.well-known/effect-broker/attempts/"
TOMBSTONE_SUFFIX = "/tombstone"
#: base64url without padding: what ``attempt_key`` makes, with room for other issuers.
ATTEMPT_KEY_PATTERN = re.compile(r"[A-Za-z0-9_-]{16,128}")


class AttemptState(StrEnum):
    COMMITTED = "committed"  # the attempt's transaction committed: its receipt is here
    TOMBSTONED = "tombstoned"  # a tombstone committed first: the attempt never can
    ABSENT = "absent"  # neither (yet): proves nothing on its own


def attempt_key(downstream_key: str, attempt: int) -> str:
    """The key of one attempt: one HMAC per attempt, keyed by the effect's derived key.

    It is computed from the effect's stored ``downstream_key`` alone, so the proxy can
    recompute the key of any past attempt even after the tenant's HMAC key has been
    rotated, and the target cannot link two attempts of one effect without that key.
    """
    if attempt < 1:
        raise ValueError(f"attempts are numbered from 1, got {attempt}")
    mac = hmac.new(
        downstream_key.encode("ascii"),
        f"effect-broker attempt {attempt}".encode("ascii"),
        hashlib.sha256,
    ).digest()
    return base64.urlsafe_b64encode(mac).rstrip(b"=").decode("ascii")


def is_attempt_key(value: str) -> bool:
    return ATTEMPT_KEY_PATTERN.fullmatch(value) is not None


def lookup_path(key: str) -> str:
    return WELL_KNOWN_PREFIX + key


def tombstone_path(key: str) -> str:
    return WELL_KNOWN_PREFIX + key + TOMBSTONE_SUFFIX


@dataclass(frozen=True, slots=True)
class StoredAnswer:
    """The response an attempt committed with: what a replay or a lookup gives back."""

    status: int
    headers: Mapping[str, str] = field(default_factory=dict)
    body: bytes = b""

    def to_json(self) -> dict[str, Any]:
        return {
            "status": self.status,
            "headers": dict(self.headers),
            "body": base64.b64encode(self.body).decode("ascii"),
        }

    @classmethod
    def from_json(cls, document: Any) -> StoredAnswer:
        """Parse ``to_json``'s form; ``ValueError`` on anything else."""
        if not isinstance(document, dict):
            raise ValueError("response is not an object")
        status, headers, body = (
            document.get("status"),
            document.get("headers"),
            document.get("body"),
        )
        if not isinstance(status, int) or not 100 <= status <= 599:
            raise ValueError(f"response.status is not an HTTP status: {status!r}")
        if not isinstance(headers, dict) or not all(
            isinstance(k, str) and isinstance(v, str) for k, v in headers.items()
        ):
            raise ValueError("response.headers is not an object of strings")
        if not isinstance(body, str):
            raise ValueError("response.body is not base64 text")
        return cls(status, headers, base64.b64decode(body, validate=True))


@dataclass(frozen=True, slots=True)
class AttemptReport:
    """What the kit says about one attempt key (lookup and tombstone answers alike).

    ``answer`` is set when ``state`` is committed; ``at`` is when the row committed
    (ISO 8601, the target's clock): the proof the ledger records.
    """

    attempt_key: str
    state: AttemptState
    at: str | None = None
    answer: StoredAnswer | None = None

    def to_json(self) -> dict[str, Any]:
        document: dict[str, Any] = {
            "protocol": PROTOCOL,
            "attempt_key": self.attempt_key,
            "state": str(self.state),
        }
        if self.at is not None:
            document["at"] = self.at
        if self.answer is not None:
            document["response"] = self.answer.to_json()
        return document

    @classmethod
    def from_json(cls, document: Any, *, expected_key: str) -> AttemptReport:
        """Parse a kit's answer about ``expected_key``; ``ValueError`` if it is not one.

        Strict on purpose: the proxy acts on this (a tombstone licenses the next
        attempt), so anything that is not exactly the kit's document proves nothing.
        """
        if not isinstance(document, dict) or document.get("protocol") != PROTOCOL:
            raise ValueError(f"not an {PROTOCOL} document")
        if document.get("attempt_key") != expected_key:
            raise ValueError("the answer is about another attempt key")
        raw_state = document.get("state")
        if raw_state not in set(AttemptState):
            raise ValueError(f"unknown state {raw_state!r}")
        state = AttemptState(raw_state)
        at = document.get("at")
        if at is not None and not isinstance(at, str):
            raise ValueError("at is not a timestamp string")
        answer = None
        if state is AttemptState.COMMITTED:
            answer = StoredAnswer.from_json(document.get("response"))
        return cls(expected_key, state, at, answer)
