"""Carrying a round's faults out on its processes, and undoing each one after its time.

Every fault restores what it broke when its time is up (a paused proxy is thawed, a
killed one restarted on its ports, the relay made prompt again, PostgreSQL started), so
once all of them have run the cluster is whole again and the ledger can settle. A fault
that cannot apply (a pause of a proxy that is dead just then) is recorded as skipped.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field

from effect_broker.demo.explorer.cluster import Cluster, Slot
from effect_broker.demo.explorer.postgres import OwnedPostgres
from effect_broker.demo.explorer.relay import LedgerRelay
from effect_broker.demo.explorer.schedule import (
    KILL,
    LEDGER_DELAY,
    LEDGER_DROP,
    LEDGER_LONG_STALL,
    LEDGER_STALL,
    LONG_PAUSE,
    PAUSE,
    PG_RESTART,
    SEND_PAUSE,
    TARGET_FAIL,
    TARGET_WITHHOLD,
    Fault,
    Schedule,
)

WATCH_EVERY = 0.02  # seconds between looks for a proxy that froze itself


@dataclass
class FaultPlayer:
    cluster: Cluster
    postgres: OwnedPostgres | None
    schedule: Schedule
    started: float  # monotonic: the round's time zero
    applied: list[str] = field(default_factory=list)
    _holds: set[asyncio.Task[None]] = field(default_factory=set)
    _outage: asyncio.Lock = field(default_factory=asyncio.Lock)  # one restart at a time

    def _note(self, text: str) -> None:
        self.applied.append(f"{time.monotonic() - self.started:6.2f}s {text}")

    async def play(self, agents: asyncio.Task[None]) -> None:
        """Apply each timed fault at its time while the agents work; then wait until
        every fault has been undone."""
        running: list[asyncio.Task[None]] = []
        for fault in self.schedule.timed:
            wait = self.started + fault.at - time.monotonic()
            if wait > 0:
                await asyncio.wait({agents}, timeout=wait)  # the schedule's clock
            if agents.done():
                self._note(f"not applied (the agents were done): {fault.describe()}")
                continue
            running.append(asyncio.create_task(self._apply(fault)))
        # Every fault undoes itself before a failure of one is raised: the server must
        # not be left down, nor a proxy dead, because another fault went wrong.
        failures = [
            outcome
            for outcome in await asyncio.gather(*running, return_exceptions=True)
            if isinstance(outcome, BaseException)
        ]
        if failures:
            raise failures[0]

    async def watch_send_pauses(self) -> None:
        """Hold every proxy that froze itself before a send for the fault's time, then
        let it go on (and send). Runs until cancelled at the end of the round."""
        fault = self.schedule.send_pause
        if fault is None:
            return
        while True:
            for slot in self.cluster.slots:
                if self.cluster.froze_itself(slot):
                    self.cluster.hold(slot, SEND_PAUSE)
                    self._note(f"proxy {slot.index} froze itself before a send")
                    task = asyncio.create_task(self._release(slot, fault.seconds))
                    self._holds.add(task)
                    task.add_done_callback(self._holds.discard)
            await asyncio.sleep(WATCH_EVERY)  # polling /proc, with no deadline: cancelled

    async def _release(self, slot: Slot, seconds: float) -> None:
        await asyncio.sleep(seconds)  # the fault itself: how long it stays frozen
        self._note(f"proxy {slot.index} thawed after {seconds:.2f}s frozen before a send")
        self.cluster.thaw(slot, SEND_PAUSE)

    async def _apply(self, fault: Fault) -> None:
        actions: dict[str, Callable[[Fault], Awaitable[None]]] = {
            KILL: self._kill,
            PAUSE: self._pause,
            LONG_PAUSE: self._pause,
            LEDGER_DELAY: self._delay,
            LEDGER_STALL: self._stall,
            LEDGER_LONG_STALL: self._stall,
            LEDGER_DROP: self._drop,
            PG_RESTART: self._restart_postgres,
            TARGET_WITHHOLD: self._target,
            TARGET_FAIL: self._target,
        }
        await actions[fault.kind](fault)

    def _slot(self, fault: Fault) -> Slot:
        assert fault.proxy is not None
        return self.cluster.slots[fault.proxy]

    async def _kill(self, fault: Fault) -> None:
        slot = self._slot(fault)
        if slot.dead:
            self._note(f"skipped (proxy {slot.index} is dead): {fault.describe()}")
            return
        self.cluster.kill(slot)
        self._note(f"proxy {slot.index} SIGKILLed")
        await asyncio.sleep(fault.seconds)  # the fault itself: how long it stays dead
        await self.cluster.restart(slot)
        self._note(f"proxy {slot.index} restarted")

    async def _pause(self, fault: Fault) -> None:
        slot = self._slot(fault)
        reason = f"{fault.kind}@{fault.at:.3f}"
        if not self.cluster.freeze(slot, reason):
            self._note(f"skipped (proxy {slot.index} is dead): {fault.describe()}")
            return
        self._note(f"proxy {slot.index} SIGSTOPped ({fault.kind})")
        await asyncio.sleep(fault.seconds)  # the fault itself: how long it is frozen
        self.cluster.thaw(slot, reason)
        self._note(f"proxy {slot.index} SIGCONTed after {fault.seconds:.2f}s")

    def _relays(self, fault: Fault) -> tuple[str, list[LedgerRelay]]:
        """The relays a ledger fault hits: one proxy's, or (no proxy) every one."""
        if fault.proxy is None:
            return "every proxy's", [slot.relay for slot in self.cluster.slots]
        return f"proxy {fault.proxy}'s", [self._slot(fault).relay]

    async def _delay(self, fault: Fault) -> None:
        whose, relays = self._relays(fault)
        for relay in relays:
            relay.delay = fault.count / 1000
        self._note(f"{whose} ledger replies +{fault.count}ms")
        await asyncio.sleep(fault.seconds)  # the fault itself
        for relay in relays:
            relay.delay = 0.0
        self._note(f"{whose} ledger replies prompt again")

    async def _stall(self, fault: Fault) -> None:
        whose, relays = self._relays(fault)
        for relay in relays:
            relay.stall()
        self._note(f"{whose} ledger replies stalled ({fault.kind})")
        await asyncio.sleep(fault.seconds)  # the fault itself
        for relay in relays:
            relay.resume()
        self._note(f"{whose} ledger replies flow again after {fault.seconds:.2f}s")

    async def _drop(self, fault: Fault) -> None:
        whose, relays = self._relays(fault)
        cut = sum(relay.drop() for relay in relays)
        self._note(f"{whose} ledger connections cut: {cut}")

    async def _restart_postgres(self, fault: Fault) -> None:
        if self.postgres is None:
            self._note(f"skipped (the server is not ours): {fault.describe()}")
            return
        if self._outage.locked():
            self._note(f"skipped (PostgreSQL is restarting): {fault.describe()}")
            return
        async with self._outage:
            await asyncio.to_thread(self.postgres.stop_fast)
            self._note("PostgreSQL stopped (fast)")
            try:
                await asyncio.sleep(fault.seconds)  # the fault itself: the outage
            finally:
                await asyncio.to_thread(self.postgres.start_again)
            self._note("PostgreSQL started")

    async def _target(self, fault: Fault) -> None:
        name = (
            "hang_after_commit" if fault.kind == TARGET_WITHHOLD else "fail_before_commit"
        )
        await self.cluster.arm_target(name, fault.count)
        self._note(f"target armed {name} x{fault.count}")

    async def stop_watching(self, watcher: asyncio.Task[None]) -> None:
        """End the send-pause watch; every held proxy is thawed now."""
        watcher.cancel()
        for task in list(self._holds):
            task.cancel()
        await asyncio.gather(watcher, *self._holds, return_exceptions=True)
        for slot in self.cluster.slots:
            if SEND_PAUSE in slot.frozen_by:
                self.cluster.thaw(slot, SEND_PAUSE)
            elif self.cluster.froze_itself(slot):  # stopped since the last look
                self.cluster.hold(slot, SEND_PAUSE)
                self.cluster.thaw(slot, SEND_PAUSE)
