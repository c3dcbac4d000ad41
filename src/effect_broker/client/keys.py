"""Operation keys that name an intent, the same on every retry of it.

The hardest part of adopting effect-broker is the key. A key built from something fresh
per call (a new uuid4, the time) makes every retry a new intent, and the ledger can no
longer stop the duplicate; a key that is too broad ("charge") suppresses real work.
``operation_key`` joins the identity of the run and the step into one bounded key, and
refuses the parts that look random per call, with the reason. An identifier that looks
random but is stored once and reused (a conversation's uuid4 thread id, say) is declared
with ``stable(...)``.

The recipes take the identity each runtime already keeps stable across retries.
"""

from __future__ import annotations

import hashlib
import re
import time
import uuid
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import date, datetime
from datetime import time as clock_time
from typing import Any

MAX_KEY = 255  # what the proxy accepts
SEPARATOR = ":"
DIGEST_CHARS = 32
_UUID4 = re.compile(
    r"^[0-9a-f]{8}-?[0-9a-f]{4}-?4[0-9a-f]{3}-?[89ab][0-9a-f]{3}-?[0-9a-f]{12}$",
    re.IGNORECASE,
)
_ISO_TIME = re.compile(r"\d{4}-\d{2}-\d{2}[T ]\d{2}:\d{2}")
_TEN_YEARS = 10 * 365 * 86400


class RandomPart(ValueError):
    """A part of an operation key would change between retries of the same intent."""


@dataclass(frozen=True, slots=True)
class Stable:
    """A value its caller vouches for: stored once, the same on every retry."""

    value: str


def stable(value: object) -> Stable:
    """Mark an id that looks random but is persisted and reused (a thread id, a job id
    from the queue), so ``operation_key`` accepts it."""
    return Stable(str(value))


Part = str | int | Stable | uuid.UUID


def operation_key(*parts: Part) -> str:
    """One key for one intent: ``parts`` joined with ``:``, at most 255 characters.

    A key longer than that keeps a readable prefix and ends with a digest of the whole,
    so two long keys differ whenever their parts do.
    """
    if not parts:
        raise ValueError("an operation key needs at least one part: the run, the step")
    text = SEPARATOR.join(_checked(part, index) for index, part in enumerate(parts))
    if len(text) <= MAX_KEY:
        return text
    digest = hashlib.sha256(text.encode()).hexdigest()[:DIGEST_CHARS]
    return f"{text[: MAX_KEY - DIGEST_CHARS - 1]}~{digest}"


def _checked(part: object, index: int) -> str:
    where = f"part {index + 1} ({part!r})"
    if isinstance(part, Stable):
        text = part.value
    elif isinstance(part, datetime | date | clock_time | float):
        raise RandomPart(
            f"{where} is a time: it changes between retries, so every retry would be a "
            "new intent. Use the id of the run and the step instead"
        )
    elif isinstance(part, uuid.UUID) and part.version == 4:
        raise RandomPart(_fresh_uuid(where))
    elif isinstance(part, bool) or not isinstance(part, str | int | uuid.UUID):
        raise TypeError(f"{where} must be a str, an int, a UUID or stable(...)")
    else:
        text = str(part)
        if isinstance(part, int) and _looks_like_now(part):
            raise RandomPart(
                f"{where} looks like the current time in seconds or milliseconds; a "
                "timestamp changes between retries. Use a counter or an id that stays"
            )
        if isinstance(part, str) and _UUID4.match(part):
            raise RandomPart(_fresh_uuid(where))
        if isinstance(part, str) and _ISO_TIME.search(part):
            raise RandomPart(
                f"{where} contains a date and time; it changes between retries. Use "
                "the id of the run and the step instead"
            )
    if not text:
        raise ValueError(f"{where} is empty")
    if any(ord(ch) < 0x20 or 0x7F <= ord(ch) <= 0x9F for ch in text):
        raise ValueError(f"{where} contains control characters, which no header carries")
    return text


def _fresh_uuid(where: str) -> str:
    return (
        f"{where} is a random uuid4: made fresh per call, it makes every retry a new "
        "intent and the ledger cannot stop the duplicate. If it is stored and reused "
        "(a thread id, a job id), pass stable(value)"
    )


def _looks_like_now(number: int) -> bool:
    now = time.time()
    return any(abs(number / scale - now) < _TEN_YEARS for scale in (1, 1000, 1_000_000))


# -- recipes -------------------------------------------------------------------------


def _runtime_id(value: object, what: str) -> Stable:
    """A runtime's own id, trusted as stable (the runtime persists it), except when it
    is plainly a clock reading: a datetime or a float is never an id a runtime keeps,
    and taking it would make every retry a new intent."""
    if isinstance(value, datetime | date | clock_time | float):
        raise RandomPart(
            f"{what} ({value!r}) is a time, not the runtime's id: it changes between "
            "retries, so every retry would be a new intent"
        )
    if value is None or value == "":
        raise ValueError(f"{what} is not set")
    return stable(value)


def langgraph_key(config: Mapping[str, Any], step: str) -> str:
    """For a LangGraph node: the thread, the checkpoint the step runs from, the step.

    A node retried or resumed from the same checkpoint sees the same ``thread_id`` and
    ``checkpoint_id`` in its ``config["configurable"]``, so it gets the same key; the
    next super-step runs from a new checkpoint, so a second deliberate call does not.
    """
    configurable = config.get("configurable") or {}
    thread = configurable.get("thread_id")
    if not thread:
        raise ValueError("config['configurable']['thread_id'] is not set")
    checkpoint = configurable.get("checkpoint_id") or "start"
    namespace = configurable.get("checkpoint_ns") or ""
    parts: list[Part] = [
        "lg",
        _runtime_id(thread, "thread_id"),
        _runtime_id(checkpoint, "checkpoint_id"),
    ]
    if namespace:
        parts.append(_runtime_id(namespace, "checkpoint_ns"))
    return operation_key(*parts, step)


def temporal_key(info: Any, step: str | None = None) -> str:
    """For a Temporal activity: ``activity.info()``'s workflow id and activity id.

    Both stay the same across the activity's retries (its ``attempt`` does not, and the
    run id changes on continue-as-new), so retries share one key.
    """
    parts: list[Part] = [
        "temporal",
        _runtime_id(info.workflow_id, "workflow_id"),
        _runtime_id(info.activity_id, "activity_id"),
    ]
    if step:
        parts.append(step)
    return operation_key(*parts)


def openai_agents_key(run_id: str, tool_call_id: str) -> str:
    """For a tool of the OpenAI Agents SDK: the run (an id your app keeps, e.g. the
    trace's ``group_id``) and the model's tool call id, which a retry of the same call
    repeats and a new call does not."""
    return operation_key(
        "agents", _runtime_id(run_id, "run_id"), _runtime_id(tool_call_id, "tool_call_id")
    )
