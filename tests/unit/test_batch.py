"""The group-commit batcher: no waiting when idle, one write for what arrived meanwhile,
each caller its own result."""

from __future__ import annotations

import asyncio
from collections.abc import Sequence

import pytest

from effect_broker.store.batch import Batcher


class Gate:
    """A batch writer that records each batch and holds it until released."""

    def __init__(self) -> None:
        self.batches: list[list[str]] = []
        self.release = asyncio.Event()
        self.entered = asyncio.Event()

    async def write(self, batch: Sequence[str]) -> Sequence[str | BaseException]:
        self.batches.append(list(batch))
        self.entered.set()
        await self.release.wait()
        return [
            ValueError(item) if item.startswith("bad") else item.upper() for item in batch
        ]


async def test_an_idle_batcher_writes_a_lone_request_at_once() -> None:
    gate = Gate()
    gate.release.set()
    batcher: Batcher[str, str] = Batcher(gate.write, key=lambda item: item)

    assert await batcher.submit("a") == "A"
    assert await batcher.submit("b") == "B"
    assert gate.batches == [["a"], ["b"]]


async def test_requests_arriving_during_a_write_share_the_next_one() -> None:
    gate = Gate()
    batcher: Batcher[str, str] = Batcher(gate.write, key=lambda item: item)

    first = asyncio.ensure_future(batcher.submit("a"))
    await gate.entered.wait()
    rest = [asyncio.ensure_future(batcher.submit(item)) for item in "bcd"]
    await asyncio.sleep(0)  # a yield so they queue; the gate, not time, holds the write
    gate.release.set()

    assert await asyncio.gather(first, *rest) == ["A", "B", "C", "D"]
    assert gate.batches == [["a"], ["b", "c", "d"]]


async def test_a_failing_request_fails_alone() -> None:
    gate = Gate()
    gate.release.set()
    batcher: Batcher[str, str] = Batcher(gate.write, key=lambda item: item)

    results = await asyncio.gather(
        batcher.submit("x"),
        batcher.submit("bad"),
        batcher.submit("y"),
        return_exceptions=True,
    )

    assert results[0] == "X" and results[2] == "Y"
    assert isinstance(results[1], ValueError)
    assert gate.batches == [["x", "bad", "y"]]


async def test_one_key_is_written_once_per_batch() -> None:
    gate = Gate()
    gate.release.set()
    batcher: Batcher[str, str] = Batcher(gate.write, key=lambda item: item[0])

    results = await asyncio.gather(*(batcher.submit(i) for i in ("k1", "k2", "j1")))

    assert results == ["K1", "K2", "J1"]
    assert gate.batches == [["k1", "j1"], ["k2"]]


async def test_batches_are_bounded() -> None:
    gate = Gate()
    gate.release.set()
    batcher: Batcher[str, str] = Batcher(gate.write, key=lambda item: item, max_size=2)

    await asyncio.gather(*(batcher.submit(str(i)) for i in range(5)))

    assert [len(batch) for batch in gate.batches] == [2, 2, 1]


async def test_a_writer_that_raises_fails_its_batch_and_not_the_next() -> None:
    calls: list[list[str]] = []

    async def write(batch: Sequence[str]) -> Sequence[str | BaseException]:
        calls.append(list(batch))
        if len(calls) == 1:
            raise RuntimeError("statement failed")
        return list(batch)

    batcher: Batcher[str, str] = Batcher(write, key=lambda item: item)

    with pytest.raises(RuntimeError, match="statement failed"):
        await batcher.submit("a")
    assert await batcher.submit("b") == "b"


async def test_a_caller_that_gives_up_leaves_the_others_their_answers() -> None:
    gate = Gate()
    batcher: Batcher[str, str] = Batcher(gate.write, key=lambda item: item)

    first = asyncio.ensure_future(batcher.submit("a"))
    await gate.entered.wait()
    quitter = asyncio.ensure_future(batcher.submit("q"))
    stayer = asyncio.ensure_future(batcher.submit("s"))
    await asyncio.sleep(0)  # a yield so they queue; the gate holds the write
    quitter.cancel()
    gate.release.set()

    assert await first == "A" and await stayer == "S"
    assert quitter.cancelled()
    assert gate.batches == [["a"], ["s"]]  # never written once its caller left
