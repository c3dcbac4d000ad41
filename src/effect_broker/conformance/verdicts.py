"""Claims, verdicts and the report (pure: no I/O)."""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum
from typing import Any

#: The claims, by the name the report shows.
SAME_KEY_ONE_EFFECT = "same key, one effect"
DRIFT_REFUSED = "payload drift refused"
KEY_RETENTION = "keys kept for key_retention"
PROBE_FINDS_COMMITTED = "probe finds a committed effect within settlement_bound"
PROBE_ABSENT_FOR_UNSENT = "probe never finds a key that was not sent"
PROBE_UNKNOWN = "probe says unknown for what it cannot tell"
KIT_FINDS_COMMITTED = "kit lookup finds a committed attempt"
KIT_REFUSES_TOMBSTONE_AFTER_COMMIT = "kit refuses a tombstone over a committed attempt"
KIT_BLOCKS_TOMBSTONED = "kit tombstone blocks a late attempt"
NO_CLAIMS = "no claims"


class Verdict(StrEnum):
    HELD = "held"
    BROKEN = "broken"
    NOT_CHECKABLE = "not checkable"


@dataclass(frozen=True, slots=True)
class ClaimResult:
    """One claim's verdict and the evidence for it, in words a person can check."""

    claim: str
    verdict: Verdict
    evidence: str

    def as_json(self) -> dict[str, str]:
        return {
            "claim": self.claim,
            "verdict": self.verdict.value,
            "evidence": self.evidence,
        }


@dataclass(frozen=True, slots=True)
class Report:
    """Every claim of one route's contract."""

    route: str
    contract: str
    safety: str
    url: str
    claims: tuple[ClaimResult, ...]

    @property
    def broken(self) -> tuple[ClaimResult, ...]:
        return tuple(c for c in self.claims if c.verdict is Verdict.BROKEN)

    @property
    def ok(self) -> bool:
        """No claim broken (a claim that could not be checked is not a failure)."""
        return not self.broken

    def as_json(self) -> dict[str, Any]:
        return {
            "route": self.route,
            "contract": self.contract,
            "safety": self.safety,
            "url": self.url,
            "ok": self.ok,
            "claims": [claim.as_json() for claim in self.claims],
        }
