"""The root of every error effect-broker raises on purpose (see ``errors``)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

PROBLEM_TYPE_BASE = "https://effect-broker.dev/problems/"


class EffectBrokerError(Exception):
    """effect-broker could not complete the operation."""

    problem_type: str = "internal-error"
    status: int = 500
    # Whether the same request, sent again later, can succeed: SDKs read it from the
    # x-should-retry / Stripe-Should-Retry headers instead of guessing from the status.
    retry_helps: bool = False
    extra: Mapping[str, Any] = {}  # members of the problem document beyond the standard

    def __init__(self, message: str | None = None) -> None:
        self.message = message or (self.__doc__ or "").strip()
        super().__init__(self.message)

    @property
    def type_uri(self) -> str:
        return PROBLEM_TYPE_BASE + self.problem_type


class DetailedProblem(EffectBrokerError):
    """An error whose problem document names what was wrong, for clients to branch on."""
