"""Domain values shared by the proxy, the reconciler and the store.

Everything here is frozen: a value read from the ledger is a snapshot, and changing the
ledger goes through the store's compare-and-swap writes, never through a mutated object.
"""

from __future__ import annotations

from enum import StrEnum


class SafetyClass(StrEnum):
    """What the target can prove, and therefore what the proxy may promise."""

    IDEMPOTENT = "idempotent"
    RECONCILABLE = "reconcilable"
    UNSAFE = "unsafe"
    TRANSACTIONAL = "transactional"


class EffectStatus(StrEnum):
    PREPARED = "prepared"
    DISPATCHING = "dispatching"
    SUCCEEDED = "succeeded"
    FAILED_FINAL = "failed_final"
    RETRYABLE = "retryable"
    OUTCOME_UNKNOWN = "outcome_unknown"
    RECONCILING = "reconciling"
    MANUAL_REVIEW = "manual_review"
