"""Contract conformance: does the target behind a route keep what its contract claims?

A contract is a claim about someone else's service. ``safety: idempotent`` with
``key_retention: 24h`` says the target deduplicates by key for a day; ``reconcilable``
says its lookup finds a committed effect within ``settlement_bound``. Every guarantee
the proxy gives is built on those claims, so ``effect-broker contracts verify`` checks
them against a sandbox of the real target, with real requests, and reports each claim
``held``, ``broken`` or ``not checkable`` (and why).

Split by job: ``verdicts`` (the claims and the report, pure), ``sandbox`` (where the
requests go and what they carry), ``idempotent`` and ``reconcilable`` (the checks of
each class) and ``verify`` (which checks a contract gets).
"""

from effect_broker.conformance.sandbox import Sandbox, SandboxRequest, sandbox_for
from effect_broker.conformance.verdicts import ClaimResult, Report, Verdict
from effect_broker.conformance.verify import VerifyOptions, verify

__all__ = [
    "ClaimResult",
    "Report",
    "Sandbox",
    "SandboxRequest",
    "Verdict",
    "VerifyOptions",
    "sandbox_for",
    "verify",
]
