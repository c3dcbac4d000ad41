"""Every error effect-broker raises on purpose, in one flat namespace.

Each class carries a stable problem ``type`` slug (RFC 9457) and the HTTP status that
fits, so the proxy and the admin API map errors to answers in one place. The docstring
of each class is its default message. The hierarchy is flat on purpose: callers catch
the one error they can act on, or ``EffectBrokerError``. The root lives in ``base``
and the admin API's refusals in ``admin``; every name is imported from here.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import timedelta

from effect_broker.errors.admin import (
    AdminTokenNotConfigured,
    AlreadySettled,
    InvalidParameter,
    InvalidResolution,
    MethodNotAllowed,
    NoReceipt,
    NotReconcilable,
    NotResolvable,
    RequeueRefused,
    Unauthorized,
)
from effect_broker.errors.base import (
    PROBLEM_TYPE_BASE,
    DetailedProblem,
    EffectBrokerError,
)


class CanonicalizationError(EffectBrokerError):
    """The request body cannot be canonicalized."""

    problem_type = "invalid-body"
    status = 400


class PayloadMismatch(EffectBrokerError):
    """This Operation-Key was already used with a different payload."""

    problem_type = "payload-mismatch"
    status = 422


class SuspectedDuplicate(EffectBrokerError):
    """A new Operation-Key with the same payload as a recent effect on this route."""

    problem_type = "suspected-duplicate"
    status = 409


class MissingOperationKey(EffectBrokerError):
    """This route records effects: send an Operation-Key header naming the intent."""

    problem_type = "missing-operation-key"
    status = 400


class InvalidOperationKey(EffectBrokerError):
    """The Operation-Key must be 1-255 printable characters without control bytes."""

    problem_type = "invalid-operation-key"
    status = 400


class InFlight(EffectBrokerError):
    """This operation is being dispatched right now; retry after the Retry-After delay."""

    problem_type = "in-flight"
    status = 409
    retry_helps = True


class OutcomeUnknown(EffectBrokerError):
    """The target may or may not have applied this effect; the detail says what a retry
    with the same Operation-Key does (it depends on the target's contract)."""

    problem_type = "outcome-unknown"
    status = 409


class BodyTooLarge(EffectBrokerError):
    """The request body is larger than this proxy accepts."""

    problem_type = "body-too-large"
    status = 413


class InvalidMcpMessage(EffectBrokerError):
    """The MCP message was refused before anything was forwarded."""

    problem_type = "invalid-mcp-message"
    status = 400


class MalformedRequest(EffectBrokerError):
    """The request is not valid HTTP, or carries bytes no route can mean."""

    problem_type = "malformed-request"
    status = 400


class RequestTimeout(EffectBrokerError):
    """The client did not send a request in time."""

    problem_type = "request-timeout"
    status = 408
    retry_helps = True


class TooManyConnections(EffectBrokerError):
    """The proxy is at its limit of open client connections."""

    problem_type = "too-many-connections"
    status = 503
    retry_helps = True


class InvalidTenantName(EffectBrokerError):
    """The tenant name cannot be used."""

    problem_type = "invalid-tenant-name"
    status = 400


class RouteRefused(EffectBrokerError):
    """This proxy refuses the request by policy."""

    problem_type = "route-refused"
    status = 403


class EgressRefused(EffectBrokerError):
    """The egress policy refuses this destination for unrecorded traffic."""

    problem_type = "egress-refused"
    status = 403


class MisdirectedRequest(EffectBrokerError):
    """This connection does not go to the origin the request names."""

    problem_type = "misdirected-request"
    status = 421


class RouteNotFound(EffectBrokerError):
    """No route matches this request."""

    problem_type = "route-not-found"
    status = 404


class UpstreamUnreachable(EffectBrokerError):
    """The target could not be reached; nothing was sent, so a retry is safe."""

    problem_type = "upstream-unreachable"
    status = 502
    retry_helps = True


class UpstreamTLS(EffectBrokerError):
    """The target's TLS certificate did not verify; nothing was sent."""

    problem_type = "upstream-tls"
    status = 502


class TLSSetupError(EffectBrokerError):
    """The proxy's CA or upstream trust bundle cannot be used."""

    problem_type = "invalid-tls-config"
    status = 500


class UpstreamBusy(EffectBrokerError):
    """Every connection this proxy allows to the target is busy; nothing was sent."""

    problem_type = "upstream-busy"
    status = 503
    retry_helps = True


class SendWithheld(EffectBrokerError):
    """The attempt was committed, but the proxy was held up before its first byte for so
    long that its lease could have run out: it sent nothing rather than risk a second
    sender. Retrying with the same Operation-Key is safe."""

    problem_type = "send-withheld"
    status = 503
    retry_helps = True


class ProxyAuthenticationRequired(EffectBrokerError):
    """This gateway needs Proxy-Authorization with a tenant API key."""

    problem_type = "proxy-authentication-required"
    status = 407


class TooManyFailedCredentials(EffectBrokerError):
    """Too many wrong credentials from this address; wait for the Retry-After delay."""

    problem_type = "too-many-failed-credentials"
    status = 429
    retry_helps = True

    def __init__(self, message: str, retry_after: timedelta) -> None:
        super().__init__(message)
        self.retry_after = retry_after


class ResolvedByOperator(EffectBrokerError):
    """An operator settled this effect by hand; it will not be sent again."""

    problem_type = "resolved-by-operator"
    status = 409


class StaleVersion(EffectBrokerError):
    """The effect changed since it was read; the write was fenced."""

    problem_type = "stale-version"
    status = 409


class IllegalTransition(EffectBrokerError):
    """The state machine does not allow this transition."""

    problem_type = "illegal-transition"
    status = 409


class EffectNotFound(EffectBrokerError):
    """No such effect for this tenant."""

    problem_type = "not-found"
    status = 404


class ReceiptExists(EffectBrokerError):
    """This effect already has a receipt; receipts are immutable."""

    problem_type = "receipt-exists"
    status = 409


class StoreUnavailable(EffectBrokerError):
    """The ledger database cannot be reached; nothing was sent upstream."""

    problem_type = "store-unavailable"
    status = 503
    retry_helps = True


class BrokenHistory(EffectBrokerError):
    """The events do not form one unbroken sequence of consistent moves."""

    problem_type = "broken-history"
    status = 500


class MasterKeyError(EffectBrokerError):
    """The master key is missing or malformed."""

    problem_type = "master-key"
    status = 500


class DecryptionError(EffectBrokerError):
    """A stored payload failed authentication: wrong key, or bound to another effect."""

    problem_type = "decryption-failed"
    status = 500


class MigrationError(EffectBrokerError):
    """The database schema cannot be brought to the version this build expects."""

    problem_type = "migration-failed"
    status = 500


@dataclass(frozen=True, slots=True)
class ConfigIssue:
    """One problem in a configuration file, located precisely enough to fix it."""

    file: str
    line: int | None
    field: str
    message: str

    def __str__(self) -> str:
        where = f"{self.file}:{self.line}" if self.line is not None else self.file
        return f"{where}: {self.field}: {self.message}"


class ConfigError(EffectBrokerError):
    """The configuration is invalid."""

    problem_type = "invalid-config"
    status = 500

    def __init__(self, issues: list[ConfigIssue]) -> None:
        self.issues = issues
        super().__init__("\n".join(str(issue) for issue in issues))


class StoreError(EffectBrokerError):
    """The ledger refused the operation."""

    problem_type = "store-error"
    status = 500


__all__ = [
    "PROBLEM_TYPE_BASE",
    "AdminTokenNotConfigured",
    "AlreadySettled",
    "BodyTooLarge",
    "BrokenHistory",
    "CanonicalizationError",
    "ConfigError",
    "DecryptionError",
    "DetailedProblem",
    "EffectBrokerError",
    "EffectNotFound",
    "EgressRefused",
    "IllegalTransition",
    "InFlight",
    "InvalidMcpMessage",
    "InvalidOperationKey",
    "InvalidParameter",
    "InvalidResolution",
    "InvalidTenantName",
    "MalformedRequest",
    "MasterKeyError",
    "MethodNotAllowed",
    "MigrationError",
    "MisdirectedRequest",
    "MissingOperationKey",
    "NoReceipt",
    "NotReconcilable",
    "NotResolvable",
    "OutcomeUnknown",
    "PayloadMismatch",
    "ProxyAuthenticationRequired",
    "ReceiptExists",
    "RequestTimeout",
    "RequeueRefused",
    "ResolvedByOperator",
    "RouteNotFound",
    "RouteRefused",
    "SendWithheld",
    "StaleVersion",
    "StoreError",
    "StoreUnavailable",
    "SuspectedDuplicate",
    "TLSSetupError",
    "TooManyConnections",
    "TooManyFailedCredentials",
    "Unauthorized",
    "UpstreamBusy",
    "UpstreamTLS",
    "UpstreamUnreachable",
]
