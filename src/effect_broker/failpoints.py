"""Named crash points for the proof: the process dies exactly here, on purpose.

Armed only by ``EFFECT_BROKER_FAILPOINTS`` (comma-separated names, read once at import),
so production code pays one frozenset lookup per point. ``os._exit`` skips every
cleanup handler, like SIGKILL or a power cut would: nothing gets to "finish up".
"""

from __future__ import annotations

import os
import sys

BEFORE_RESERVE_COMMIT = "before_reserve_commit"
AFTER_RESERVE = "after_reserve"
BEFORE_UPSTREAM_SEND = "before_upstream_send"
AFTER_UPSTREAM_RESPONSE = "after_upstream_response"
AFTER_RECEIPT_COMMIT = "after_receipt_commit"
# Inside a group commit: the batch's statement committed, none of its requests answered.
IN_RESERVE_BATCH = "in_reserve_batch"
IN_RECEIPT_BATCH = "in_receipt_batch"

ALL = (
    BEFORE_RESERVE_COMMIT,
    AFTER_RESERVE,
    BEFORE_UPSTREAM_SEND,
    AFTER_UPSTREAM_RESPONSE,
    AFTER_RECEIPT_COMMIT,
    IN_RESERVE_BATCH,
    IN_RECEIPT_BATCH,
)
EXIT_CODE = 86


def _armed_from_environment() -> frozenset[str]:
    raw = os.environ.get("EFFECT_BROKER_FAILPOINTS", "")
    names = frozenset(name.strip() for name in raw.split(",") if name.strip())
    unknown = names - set(ALL)
    if unknown:
        raise SystemExit(
            f"EFFECT_BROKER_FAILPOINTS names unknown failpoints {sorted(unknown)}; "
            f"known: {', '.join(ALL)}"
        )
    return names


ARMED = _armed_from_environment()


def hit(name: str) -> None:
    """Die here if this failpoint is armed; otherwise do nothing."""
    if name in ARMED:
        print(
            f"effect-broker: failpoint {name} hit, exiting", file=sys.stderr, flush=True
        )
        os._exit(EXIT_CODE)
