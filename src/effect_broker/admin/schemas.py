"""What the admin API answers, as pydantic models: the one description of every shape.

Handlers build these and serialize them with ``model_dump(mode="json")``, and
``admin.openapi`` generates the published document from the same classes, so what the
API sends and what its schema promises cannot drift apart. Field descriptions are the
documentation; keep them written for the operator reading ``/openapi.json``.
"""

from __future__ import annotations

import os
from datetime import datetime
from typing import Any, Literal
from uuid import UUID

from pydantic import BaseModel, ConfigDict, Field

from effect_broker.models import EffectStatus, ReceiptSource, SafetyClass

# The shape of the cursor ``encode_cursor`` writes: microseconds since the Unix epoch of
# the last effect's creation, a dot, its id in hex. Stated as a pattern so that every
# cursor the schema allows is one the API can decode (see ``views.decode_cursor``).
CURSOR_PATTERN = r"^[0-9]{1,17}\.[0-9a-f]{32}$"
HEX = r"^[0-9a-f]*$"


class Answer(BaseModel):
    """Base of every response model: built by handlers, never parsed from clients."""

    model_config = ConfigDict(
        frozen=True,
        validate_by_name=True,
        validate_by_alias=True,
        serialize_by_alias=True,
    )


class Health(Answer):
    """``/healthz``: the process answers."""

    status: Literal["ok"] = "ok"
    pid: int = Field(
        default_factory=os.getpid,
        description="The process that answered: under `serve --workers N` each worker "
        "has its own, and the admin port is shared, so this tells them apart.",
    )


class Readiness(Answer):
    """``/readyz``: whether the ledger answers with the schema this build expects."""

    status: Literal["ready", "unavailable", "migrations pending"]
    detail: str | None = Field(
        default=None,
        description="Why the ledger is unavailable.",
        exclude_if=lambda value: value is None,
    )
    pending: list[str] | None = Field(
        default=None,
        description="The migrations still to apply (`effect-broker migrate`).",
        exclude_if=lambda value: value is None,
    )


class Effect(Answer):
    """One effect, as the list and every operator action return it."""

    id: UUID = Field(description="The effect's id (the Effect-Id response header).")
    tenant: str
    operation_key: str = Field(description="The client's Operation-Key.")
    route: str = Field(description="The routes.yaml route that matched.")
    contract: str = Field(description="The contract, as `name@version`.")
    safety: SafetyClass = Field(description="What the target lets effect-broker prove.")
    status: EffectStatus
    version: int = Field(ge=1, description="Bumped by every change (optimistic locking).")
    attempts: int = Field(ge=0, description="How many times it was sent to the target.")
    downstream_key: str = Field(
        description="The idempotency or correlation key the target saw: search the "
        "target's own records by it before resolving by hand."
    )
    created_at: datetime
    updated_at: datetime
    first_dispatched_at: datetime | None
    due_at: datetime | None = Field(description="When the reconciler looks next.")
    retention_deadline: datetime | None = Field(
        description="Until when the target honours the idempotency key."
    )
    settlement_deadline: datetime | None = Field(
        description="When a lookup may first be trusted to say 'absent'."
    )
    lease_owner: str | None = Field(description="The process working on it now.")
    lease_expires_at: datetime | None
    last_error: str | None = Field(description="Why it is not settled, if known.")
    request_preview: dict[str, Any] = Field(
        description="Method, path, content type and size of the request, and the trace "
        "context of the request span; no values."
    )
    trace_id: str | None = Field(
        pattern="^[0-9a-f]{32}$",
        description="The OpenTelemetry trace of the request that made the effect, when "
        "tracing was on: search the tracing backend for it.",
    )


class EffectPage(Answer):
    """One page of effects, newest first."""

    effects: list[Effect]
    next_cursor: str | None = Field(
        pattern=CURSOR_PATTERN,
        description="Pass as `cursor` for the next page; null on the last page.",
    )


class Event(Answer):
    """One entry of an effect's append-only, hash-chained history."""

    seq: int = Field(ge=1)
    kind: str
    from_status: EffectStatus | None = Field(alias="from")
    to: EffectStatus
    actor: str = Field(description="Who made the change (`operator:<tenant>` by hand).")
    details: dict[str, Any]
    occurred_at: datetime
    prev_digest: str = Field(
        pattern=HEX, description="The previous event's digest, hex; empty for the first."
    )
    digest: str = Field(pattern=HEX, description="SHA-256 over this event, hex.")


class Attempt(Answer):
    """One send to the target."""

    attempt_no: int = Field(ge=1)
    owner: str
    started_at: datetime


class HistoryState(Answer):
    """The effect as the events up to ``seq`` fold to: what the ledger believed then."""

    seq: int = Field(ge=1)
    status: EffectStatus
    attempts: int = Field(ge=0)
    last_kind: str
    last_actor: str
    occurred_at: datetime


class ShownRequest(Answer):
    """The stored request as an operator may see it: what to look for at the target.

    Credentials are hidden: header values whose names say credential or that the
    route injects, and the values of secret-looking fields anywhere in a JSON body.
    """

    method: str
    url: str
    headers: list[tuple[str, str]] = Field(
        description="[name, value] pairs, in order; hidden values read `[redacted]`."
    )
    body: str = Field(
        description="The body: indented JSON, text, or a sentence saying what it is "
        "when it cannot be shown (binary, too large)."
    )
    redacted: list[str] = Field(
        description="What was hidden: `header NAME` and `body /json/pointer` entries."
    )


class EffectDetail(Effect):
    """The inspect view: the effect, its full history and what its contract can prove."""

    guarantee: str = Field(
        description="What this safety class lets the proxy prove, and what it cannot."
    )
    chain_intact: bool = Field(description="Every event digest verifies.")
    history: list[Event]
    attempt_log: list[Attempt]
    request: ShownRequest | None = Field(
        description="The request as the client sent it, decrypted for this tenant "
        "with its credentials hidden; null when it cannot be opened."
    )
    at_sequence: HistoryState | None = Field(
        default=None,
        description="Present when `at_sequence` was asked for.",
        exclude_if=lambda value: value is None,
    )


class StoredAnswer(Answer):
    """The answer a client retry with the same Operation-Key gets back."""

    status: int = Field(ge=100, le=599)
    reason: str
    headers: list[tuple[str, str]] = Field(description="[name, value] pairs, in order.")
    body_base64: str = Field(json_schema_extra={"contentEncoding": "base64"})
    body_text: str | None = Field(description="The body, if it is UTF-8; else null.")


class Receipt(Answer):
    """The immutable receipt of a settled effect, decrypted for its own tenant."""

    effect_id: UUID
    status_code: int = Field(ge=100, le=599)
    source: ReceiptSource = Field(description="Who produced the answer.")
    external_id: str | None = Field(description="The target's id for the effect.")
    recorded_at: datetime
    response: StoredAnswer


class Problem(BaseModel):
    """RFC 9457 problem details: every error the admin API answers."""

    model_config = ConfigDict(extra="allow")

    type: str = Field(
        json_schema_extra={"format": "uri"},
        description="Stable per cause, under https://effect-broker.dev/problems/.",
    )
    title: str
    status: int = Field(ge=400, le=599)
    detail: str = Field(description="What went wrong and what to do about it.")
    parameter: str | None = Field(
        default=None, description="`invalid-parameter`: the query parameter at fault."
    )
    field: str | None = Field(
        default=None, description="`invalid-resolution`: the body field at fault."
    )
