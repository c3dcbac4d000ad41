"""What the admin API accepts, as pydantic models: query parameters and the resolve body.

Every rule a handler enforces is stated on a model (range, length, pattern, enum, which
fields exist), because the published schema is generated from these classes: a request
the schema calls valid must be one the API accepts. Text that reaches PostgreSQL may not
hold NUL (``\\x00``), which neither ``text`` nor ``jsonb`` can store, so the patterns
say so instead of letting the ledger fail with a 500.

The one rule JSON Schema cannot state is the byte size of ``evidence``; it is in the
field's description and checked here.
"""

from __future__ import annotations

import json
from typing import Annotated, Any, ClassVar, Literal
from uuid import UUID

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    StringConstraints,
    TypeAdapter,
    field_validator,
)
from pydantic_core import PydanticCustomError
from typing_extensions import TypeAliasType

from effect_broker.admin.schemas import CURSOR_PATTERN
from effect_broker.models import EffectStatus

MAX_REASON = 1000
MAX_EXTERNAL_ID = 255
MAX_EVIDENCE_BYTES = 16 * 1024
DEFAULT_LIMIT = 50
MAX_LIMIT = 500
# ``older_than`` is subtracted from now; a century is further back than any ledger goes
# and keeps the subtraction far inside what a timestamp can hold.
MAX_OLDER_THAN = 100 * 365 * 86400

# Python's ``str.isspace`` set, spelled out: JSON Schema's ``\s`` (ECMA-262) differs from
# it, and "non-blank" must mean the same in the schema and in ``str.strip``.
_SPACE = (
    r"\t\n\x0b\x0c\r\x1c-\x1f \x85\xa0\u1680\u2000-\u200a\u2028\u2029\u202f\u205f\u3000"
)
NO_NUL = r"^[^\x00]*$"
NOT_BLANK = rf"^[^\x00]*[^\x00{_SPACE}][^\x00]*$"

Text = Annotated[str, StringConstraints(pattern=NO_NUL)]


class Query(BaseModel):
    """Base of query-parameter models: unknown parameters are refused, not ignored.

    A misspelt filter that silently listed everything could lead an operator to
    resolve the wrong effect.
    """

    model_config = ConfigDict(extra="forbid", frozen=True)
    repeatable: ClassVar[frozenset[str]] = frozenset()


class ListQuery(Query):
    """``GET /v1/effects``: filters, page size and cursor."""

    repeatable: ClassVar[frozenset[str]] = frozenset({"status"})

    status: list[EffectStatus] | None = Field(
        default=None, description="Only these statuses; repeat for several."
    )
    route: Text | None = Field(
        default=None, description="Only effects of this route (routes.yaml name)."
    )
    operation_key_prefix: Text | None = Field(
        default=None, description="Only operation keys starting with this text."
    )
    older_than: float | None = Field(
        default=None,
        ge=0,
        le=MAX_OLDER_THAN,
        allow_inf_nan=False,
        description="Only effects created at least this many seconds ago.",
    )
    limit: int = Field(
        default=DEFAULT_LIMIT, ge=1, le=MAX_LIMIT, description="Page size."
    )
    cursor: str | None = Field(
        default=None,
        pattern=CURSOR_PATTERN,
        description="The `next_cursor` of the previous page, as is.",
    )


class InspectQuery(Query):
    """``GET /v1/effects/{effect_id}``: optionally fold the history to one event."""

    at_sequence: int | None = Field(
        default=None,
        ge=1,
        description="Also fold the history up to this event: what the ledger believed "
        "at that step. An effect without that event answers 404 `no-such-event`.",
    )


class EffectPath(BaseModel):
    """The path parameter of every ``/v1/effects/{effect_id}`` route."""

    effect_id: UUID = Field(
        description="The effect's id (the Effect-Id response header). Anything that is "
        "not the id of one of this tenant's effects answers 404 `not-found`."
    )


# Evidence is free-form JSON, except that no string in it may hold NUL (jsonb refuses).
EvidenceValue = TypeAliasType(
    "EvidenceValue",
    "Text | int | float | bool | list[EvidenceValue] | dict[Text, EvidenceValue] | None",
)
EVIDENCE_DESCRIPTION = (
    "Where you checked, as a JSON object, e.g. "
    '{"external_id": "ch_1", "checked_in": "stripe dashboard"}; at most '
    f"{MAX_EVIDENCE_BYTES} bytes as JSON. Recorded in the effect's history."
)


class _Resolve(BaseModel):
    """What every resolution shares; unknown fields are refused so typos are not lost."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    reason: str = Field(
        max_length=MAX_REASON,
        pattern=NOT_BLANK,
        description="Why, for whoever reads this history next. Not blank.",
    )
    external_id: str | None = Field(
        default=None,
        max_length=MAX_EXTERNAL_ID,
        pattern=NOT_BLANK,
        description="The target's id for the effect, kept on the receipt.",
    )
    evidence: dict[Text, EvidenceValue] = Field(
        default_factory=dict, description=EVIDENCE_DESCRIPTION
    )

    @field_validator("evidence")
    @classmethod
    def _small_enough(cls, evidence: dict[str, Any]) -> dict[str, Any]:
        if len(json.dumps(evidence).encode()) > MAX_EVIDENCE_BYTES:
            raise PydanticCustomError(
                "evidence_too_large",
                "is larger than {limit} bytes",
                {"limit": MAX_EVIDENCE_BYTES},
            )
        return evidence


class ResolveSucceeded(_Resolve):
    """It happened: settle with an operator receipt (200) that client retries replay."""

    resolution: Literal["succeeded"]
    evidence: dict[Text, EvidenceValue] = Field(  # required, and not empty
        min_length=1,
        description=EVIDENCE_DESCRIPTION + " Required to resolve as succeeded.",
    )


class ResolveNotCommitted(_Resolve):
    """It did not happen: requeue for dispatch (idempotent and reconcilable only)."""

    resolution: Literal["not_committed"]


class ResolveDidNotHappen(_Resolve):
    """It did not happen, with proof: settle as failed_final with a 422 receipt; the
    agent is told it did not happen and may send it again under a new Operation-Key."""

    resolution: Literal["did_not_happen"]
    evidence: dict[Text, EvidenceValue] = Field(  # required, and not empty
        min_length=1,
        description=EVIDENCE_DESCRIPTION + " Required: the proof it did not happen.",
    )


class ResolveAbandoned(_Resolve):
    """Given up without knowing: settle as failed_final with a 422 receipt; the agent is
    told it may have happened, and that a new Operation-Key risks doing it twice."""

    resolution: Literal["abandoned"]


class ResolveFailed(_Resolve):
    """Deprecated: the old word for ``abandoned``, accepted and recorded as abandoned."""

    model_config = ConfigDict(
        extra="forbid", frozen=True, json_schema_extra={"deprecated": True}
    )

    resolution: Literal["failed"]


ResolveBody = Annotated[
    ResolveSucceeded
    | ResolveNotCommitted
    | ResolveDidNotHappen
    | ResolveAbandoned
    | ResolveFailed,
    Field(discriminator="resolution"),
]
RESOLVE_BODY: TypeAdapter[
    ResolveSucceeded
    | ResolveNotCommitted
    | ResolveDidNotHappen
    | ResolveAbandoned
    | ResolveFailed
] = TypeAdapter(ResolveBody)
RESOLUTION_FIELDS = ("evidence", "external_id", "reason", "resolution")
