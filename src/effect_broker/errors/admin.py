"""The admin API's own refusals (see ``errors``): what an operator asked for that
cannot be done, or cannot be done by this caller."""

from __future__ import annotations

from effect_broker.errors.base import DetailedProblem, EffectBrokerError


class NoReceipt(EffectBrokerError):
    """This effect has no receipt yet."""

    problem_type = "no-receipt"
    status = 404


class MethodNotAllowed(EffectBrokerError):
    """This admin route does not take that method."""

    problem_type = "method-not-allowed"
    status = 405


class Unauthorized(EffectBrokerError):
    """The admin API needs a valid bearer token."""

    problem_type = "unauthorized"
    status = 401


class AdminTokenNotConfigured(EffectBrokerError):
    """The admin API is locked: no admin token is configured."""

    problem_type = "admin-token-not-configured"
    status = 401


class InvalidParameter(DetailedProblem):
    """A query or path parameter is invalid."""

    problem_type = "invalid-parameter"
    status = 400

    def __init__(self, parameter: str, message: str) -> None:
        super().__init__(f"parameter {parameter!r} {message}")
        self.extra = {"parameter": parameter}


class InvalidResolution(DetailedProblem):
    """The resolution request is incomplete or malformed."""

    problem_type = "invalid-resolution"
    status = 400

    def __init__(self, field: str, message: str) -> None:
        super().__init__(f"{field}: {message}")
        self.extra = {"field": field}


class RequeueRefused(EffectBrokerError):
    """This effect's contract does not allow sending it again."""

    problem_type = "requeue-refused"
    status = 409


class AlreadySettled(EffectBrokerError):
    """The effect is already settled; its receipt is immutable."""

    problem_type = "already-settled"
    status = 409


class NotResolvable(EffectBrokerError):
    """Only an effect whose outcome is unknown or under review can be resolved."""

    problem_type = "not-resolvable"
    status = 409


class NotReconcilable(EffectBrokerError):
    """Nothing automatic can settle this effect now."""

    problem_type = "not-reconcilable"
    status = 409
