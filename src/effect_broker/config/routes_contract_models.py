"""The contract sections of routes.yaml as pydantic models, one class per safety class.

Kept apart from ``routes_models`` so each stays short; a route refers to a contract by
name and the file model embeds the ``ContractSection`` union. Contracts are
discriminated on ``safety``: each class has exactly the fields it uses, so a field of
another class is an unknown key, not a silent no-op.
"""

from __future__ import annotations

from datetime import timedelta
from typing import Annotated, Literal, get_args

from pydantic import (
    BaseModel,
    Field,
    StringConstraints,
    model_validator,
)

from effect_broker.config.contracts import (
    DEFAULT_IN_FLIGHT_WAIT,
    DEFAULT_RETRY_LIMIT,
    DEFAULT_TIMEOUT,
    ErrorDialect,
)
from effect_broker.config.routes_fields import (
    JSON_POINTER_PATTERN,
    PROBE_PATH_PATTERN,
    ContractVersion,
    Duration,
    HeaderName,
    Name,
    Optional,
    Section,
    Statuses,
)
from effect_broker.config.routes_mcp_models import ARGUMENT_PATTERN


class DuplicatePayloadSection(Section):
    """What to do with a new operation key whose payload equals a recent effect's."""

    mode: Literal["off", "warn", "hold"] = Field(
        description="off; warn: count it (effect_broker_suspected_duplicates_total) and "
        "log it; hold: answer 409 suspected-duplicate naming the earlier effect, unless "
        "the client sends Effect-Repeat: intentional."
    )
    window: Duration = Field(
        timedelta(minutes=10),
        description="How far back an equal payload counts as the same intent, e.g. 10m.",
    )


class ContractBase(Section):
    """What every contract has, whatever its safety class."""

    name: Name = Field(description="Unique in the file; routes refer to it.")
    version: ContractVersion = Field(
        description='Pinned into every effect; bump it (a string, e.g. "2") when what '
        "the target promises changes."
    )
    safety: str = Field(description="What the target can prove after a lost response.")
    timeout: Duration = Field(
        DEFAULT_TIMEOUT,
        description="How long one attempt may take, e.g. 10s; for a streamed answer "
        "(text/event-stream, or a body of unknown length), how long until its head.",
    )
    retry_limit: int = Field(
        DEFAULT_RETRY_LIMIT, ge=0, description="Attempts the reconciler may add."
    )
    lease_grace: Optional[Duration] = Field(
        None,
        description="How long an attempt's lease outlasts its last moment to start "
        "sending (default: proxy's EFFECT_BROKER_LEASE_GRACE, 5s). A proxy held up "
        "past that moment sends nothing; longer survives longer pauses between the "
        "check and the write, at the price of a later takeover of a dead sender.",
    )
    in_flight_wait: Duration = Field(
        DEFAULT_IN_FLIGHT_WAIT,
        description="How long a request with the key of one in flight waits for its "
        "answer (and gets it as a replay) before a 409; a client's Prefer: wait=N "
        "(RFC 7240, at most 60s) overrides it for its own request. 0s: answer at once.",
    )
    stream_idle_timeout: Optional[Duration] = Field(
        None,
        description="How long a streamed answer may go without a byte before its "
        "outcome is unknown (default: timeout); a stream that keeps flowing may outlast "
        "timeout and still settle as answered.",
    )
    ledger_retention: Optional[Duration] = Field(
        None,
        description="How long a settled effect stays in the ledger before it is pruned "
        "(default: 7d, or key_retention when longer); never shorter than key_retention.",
    )
    duplicate_payload_window: Optional[DuplicatePayloadSection] = Field(
        None,
        description="Guard against keys minted fresh per retry: a new operation key "
        "whose payload equals a recent effect's on the same route (default: off).",
    )
    operation_key_header: Optional[HeaderName] = Field(
        None,
        description="Overrides proxy.operation_key_header for this contract's routes; "
        "may be the idempotency header itself (Idempotency-Key), so an SDK's own key "
        "becomes the operation key while the target still gets the derived key.",
    )
    error_dialect: ErrorDialect = Field(
        "problem",
        description="How the proxy's own refusals on this contract's routes are "
        "written: problem (RFC 9457 problem+json), or the error envelope an SDK parses "
        '({"error": {"type", "code", "message", ...}}): stripe, openai, anthropic.',
    )


class IdempotentContract(ContractBase):
    """The target deduplicates on a stable key and keeps results for key_retention."""

    safety: Literal["idempotent"]
    idempotency_header: Optional[HeaderName] = Field(
        None,
        description="the header that carries the stable key the target deduplicates "
        "on (this or idempotency_argument)",
    )
    idempotency_argument: Optional[
        Annotated[str, StringConstraints(pattern=ARGUMENT_PATTERN)]
    ] = Field(
        None,
        description="MCP tools only: the tool argument the proxy sets to the stable "
        "key, for servers that read it from the arguments",
    )
    key_retention: Duration = Field(
        description="how long the target keeps a key's result; a redispatch is safe "
        "only inside it"
    )

    @model_validator(mode="after")
    def _one_key_place(self) -> IdempotentContract:
        if self.idempotency_header is not None and self.idempotency_argument:
            raise ValueError(
                "an idempotent contract names one of idempotency_header and "
                "idempotency_argument: where the target reads its stable key"
            )
        return self


class FoundAnswer(Section):
    """Probe answers that prove the effect committed."""

    status: Statuses = Field(description="HTTP status codes, e.g. [200].")
    external_id: Optional[
        Annotated[str, StringConstraints(pattern=JSON_POINTER_PATTERN)]
    ] = Field(
        None, description="A JSON pointer to the target's id in the body, e.g. /id."
    )


class AbsentAnswer(Section):
    """Probe answers that prove the effect did not commit (after settlement_bound)."""

    status: Statuses = Field(description="HTTP status codes, e.g. [404].")


class ProbeSection(Section):
    """An authoritative lookup by correlation key; any other answer means unknown."""

    method: Literal["GET", "HEAD"] = Field(
        "GET", description="GET or HEAD: a probe must not change anything."
    )
    path: Annotated[str, StringConstraints(pattern=PROBE_PATH_PATTERN)] = Field(
        description="Sent to the route's upstream, with {downstream_key} replaced."
    )
    found: FoundAnswer
    absent: AbsentAnswer


class ReconcilableContract(ContractBase):
    """The target records a correlation key and answers a lookup by it."""

    safety: Literal["reconcilable"]
    correlation_header: HeaderName = Field(
        description="the header the target records and the probe looks the effect up by"
    )
    settlement_bound: Duration = Field(
        description="only after it is a negative lookup conclusive; without it absence "
        "is unprovable"
    )
    probe: ProbeSection = Field(
        description="the authoritative lookup that decides committed or not after a "
        "lost response"
    )


class UnsafeContract(ContractBase):
    """The target offers nothing: dispatch at most once, a lost response stays unknown."""

    safety: Literal["unsafe"]


class TransactionalContract(ContractBase):
    """The target runs the effect-broker target kit: each attempt's mutation and its
    receipt commit in one transaction of the target's own PostgreSQL, under the attempt
    key the proxy sends, and the kit answers lookup and tombstone by that key. The
    route's inject_headers carry the kit's shared secret (Effect-Broker-Secret)."""

    safety: Literal["transactional"]


ContractSection = Annotated[
    IdempotentContract | ReconcilableContract | UnsafeContract | TransactionalContract,
    Field(discriminator="safety"),
]
CONTRACT_CLASSES: tuple[type[ContractBase], ...] = (
    IdempotentContract,
    ReconcilableContract,
    UnsafeContract,
    TransactionalContract,
)
SAFETY_CHOICES = ("idempotent", "reconcilable", "unsafe", "transactional")


def safety_of(model: type[BaseModel]) -> str | None:
    """The safety tag of a contract class, or None for any other model."""
    if not issubclass(model, ContractBase) or model is ContractBase:
        return None
    return str(get_args(model.model_fields["safety"].annotation)[0])


def class_field_owner(key: str) -> type[ContractBase] | None:
    """The one contract class that uses ``key``, if ``key`` is class-specific."""
    for model in CONTRACT_CLASSES:
        if key in model.model_fields and key not in ContractBase.model_fields:
            return model
    return None
