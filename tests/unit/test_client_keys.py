"""operation_key: stable across processes, bounded, and refusing parts that change per
retry; the recipes take each runtime's own stable identity (small fakes stand in for
the frameworks' objects)."""

from __future__ import annotations

import time
import uuid
from dataclasses import dataclass
from datetime import UTC, datetime

import pytest
from hypothesis import given
from hypothesis import strategies as st

from effect_broker.client import (
    RandomPart,
    langgraph_key,
    openai_agents_key,
    operation_key,
    stable,
    temporal_key,
)


@pytest.mark.parametrize(
    ("part", "why"),
    [
        (uuid.uuid4(), "random uuid4"),
        (str(uuid.uuid4()), "random uuid4"),
        (uuid.uuid4().hex, "random uuid4"),
        (datetime.now(UTC), "is a time"),
        (time.time(), "is a time"),
        (int(time.time()), "current time"),
        (int(time.time() * 1000), "current time"),
        ("run-2026-12-01T10:00:00", "date and time"),
    ],
    ids=lambda value: type(value).__name__ if not isinstance(value, str) else "",
)
def test_parts_that_change_per_retry_are_refused_with_the_reason(
    part: object, why: str
) -> None:
    with pytest.raises(RandomPart, match=why):
        operation_key("charge", part)  # type: ignore[arg-type]


def test_a_persisted_uuid4_is_accepted_when_declared_stable() -> None:
    thread = str(uuid.uuid4())
    assert operation_key(stable(thread), "charge") == f"{thread}:charge"


def test_deterministic_uuids_and_small_numbers_are_fine() -> None:
    named = uuid.uuid5(uuid.NAMESPACE_URL, "https://shop.test/order/42")
    assert operation_key(named, 7) == f"{named}:7"


@pytest.mark.parametrize("bad", ["", "tab\there", "nel\x85"])
def test_empty_and_control_characters_are_refused(bad: str) -> None:
    with pytest.raises(ValueError):
        operation_key("order-1", bad)


@given(st.lists(st.text(alphabet="abcdefghij-_.", min_size=1, max_size=90), min_size=1))
def test_keys_are_bounded_and_long_ones_stay_distinct(parts: list[str]) -> None:
    key = operation_key(*parts)
    assert len(key) <= 255
    assert operation_key(*parts, "x") != key


@dataclass
class ActivityInfo:  # the fields of temporalio.activity.Info the recipe reads
    workflow_id: str
    activity_id: str
    attempt: int
    workflow_run_id: str


def test_temporal_retries_of_one_activity_share_a_key() -> None:
    first = ActivityInfo("order-42-flow", "3", attempt=1, workflow_run_id="r1")
    retry = ActivityInfo("order-42-flow", "3", attempt=2, workflow_run_id="r2")
    other = ActivityInfo("order-42-flow", "4", attempt=1, workflow_run_id="r1")
    assert temporal_key(first) == temporal_key(retry) != temporal_key(other)


def test_langgraph_keys_follow_the_thread_and_checkpoint() -> None:
    thread = str(uuid.uuid4())  # LangGraph thread ids are uuid4s, persisted
    config = {"configurable": {"thread_id": thread, "checkpoint_id": "1ef-a"}}
    resumed = {"configurable": {"thread_id": thread, "checkpoint_id": "1ef-a"}}
    next_step = {"configurable": {"thread_id": thread, "checkpoint_id": "1ef-b"}}
    assert langgraph_key(config, "charge") == langgraph_key(resumed, "charge")
    assert langgraph_key(config, "charge") != langgraph_key(next_step, "charge")
    with pytest.raises(ValueError, match="thread_id"):
        langgraph_key({"configurable": {}}, "charge")


def test_openai_agents_keys_follow_the_tool_call() -> None:
    key = openai_agents_key("conv-9", "call_abc")
    assert (
        key
        == openai_agents_key("conv-9", "call_abc")
        != openai_agents_key("conv-9", "call_def")
    )


def test_a_plain_loop_names_its_job_and_step() -> None:
    keys = {operation_key("nightly-invoices", "2026-12-01", n) for n in range(3)}
    assert keys == {f"nightly-invoices:2026-12-01:{n}" for n in range(3)}


def test_recipes_refuse_a_step_that_changes_per_retry() -> None:
    info = ActivityInfo("order-42-flow", "3", attempt=1, workflow_run_id="r1")
    config = {"configurable": {"thread_id": "t-1", "checkpoint_id": "1ef-a"}}
    with pytest.raises(RandomPart, match="uuid4"):
        temporal_key(info, str(uuid.uuid4()))
    with pytest.raises(RandomPart, match="date and time"):
        langgraph_key(config, f"charge-{datetime.now(UTC).isoformat()}")


def test_recipes_refuse_a_clock_reading_passed_as_the_runtimes_id() -> None:
    with pytest.raises(RandomPart, match="run_id"):
        openai_agents_key(time.time(), "call_abc")  # type: ignore[arg-type]
    with pytest.raises(RandomPart, match="thread_id"):
        langgraph_key({"configurable": {"thread_id": datetime.now(UTC)}}, "charge")
    with pytest.raises(ValueError, match="tool_call_id"):
        openai_agents_key("conv-9", "")
