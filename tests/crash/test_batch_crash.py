"""A crash inside a group commit of many requests leaves every effect of the batch in a
state the crash matrix accepts.

The crash matrix kills the proxy at ``in_reserve_batch`` and ``in_receipt_batch`` with
one agent (a batch of one). Here a real process writes a batch of several requests and
dies at the same failpoint (``os._exit``, like SIGKILL): after the reservation batch
every effect is DISPATCHING with its attempt and a lease, as after ``after_reserve``;
after the receipt batch every effect is SUCCEEDED with its receipt, as after
``after_receipt_commit``. No effect of a batch is half-written or missing.
"""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap

import pytest

from effect_broker import failpoints
from effect_broker.models import EffectStatus
from effect_broker.store import Store

pytestmark = pytest.mark.postgres

KEYS = [f"batch-{i}" for i in range(6)]

CHILD = textwrap.dedent(
    """
    import asyncio, sys
    from datetime import timedelta
    from effect_broker.models import EffectStatus, ReceiptSource, SafetyClass
    from effect_broker.store import AttemptTerms, Store

    async def main(dsn, step, keys):
        store = await Store.connect(dsn)
        if step == "reserve":
            await asyncio.gather(*(store.reserve(
                tenant_id="acme", operation_key=key, request_hash="h", route="r",
                contract_name="c", contract_version="1",
                safety=SafetyClass.IDEMPOTENT, downstream_key="dk",
                request_ciphertext=b"sealed", request_preview={}, owner="proxy-a",
                lease=timedelta(seconds=30),
                start=AttemptTerms(key_retention=timedelta(hours=1)),
            ) for key in keys))
        else:
            effects = [await store.get_by_key("acme", key) for key in keys]
            await asyncio.gather(*(store.record_receipt(
                effect, status=EffectStatus.SUCCEEDED, status_code=201,
                response_ciphertext=b"receipt", source=ReceiptSource.RESPONSE,
                actor="proxy-a",
            ) for effect in effects))
        print("the failpoint was never hit", file=sys.stderr)

    asyncio.run(main(sys.argv[1], sys.argv[2], sys.argv[3:]))
    """
)


def crash_at(database_url: str, failpoint: str, step: str) -> None:
    env = {**os.environ, "EFFECT_BROKER_FAILPOINTS": failpoint}
    done = subprocess.run(
        [sys.executable, "-c", CHILD, database_url, step, *KEYS],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == failpoints.EXIT_CODE, done.stderr
    assert f"failpoint {failpoint} hit" in done.stderr


async def test_a_crash_inside_batches_leaves_every_effect_whole(
    store: Store, database_url: str
) -> None:
    crash_at(database_url, failpoints.IN_RESERVE_BATCH, "reserve")

    # The process died at its first batch: had that batch held fewer than all six,
    # the rest would be missing here. All of them are whole.
    reserved = [await store.get_by_key("acme", key) for key in KEYS]
    for effect in reserved:
        assert effect is not None
        assert effect.status is EffectStatus.DISPATCHING and effect.attempts == 1
        assert effect.lease_expires_at is not None and effect.due_at is not None
        assert len(await store.attempts("acme", effect.effect_id)) == 1
        assert await store.verify_events(effect.tenant_id, effect.effect_id) is None

    crash_at(database_url, failpoints.IN_RECEIPT_BATCH, "receipt")

    for before in reserved:
        assert before is not None
        effect = await store.get("acme", before.effect_id)
        assert effect.status is EffectStatus.SUCCEEDED and effect.due_at is None
        receipt = await store.receipt("acme", effect.effect_id)
        assert receipt is not None and receipt.status_code == 201
        assert await store.verify_events(effect.tenant_id, effect.effect_id) is None
