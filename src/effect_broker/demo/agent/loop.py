"""The tool-calling conversation: the model asks, the tool acts, the model reports.

The model sees one tool and the user's request. Whatever tool calls it makes are run in
order and their results handed back, until it answers in text or runs out of turns.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

from effect_broker.demo.agent.models import ChatModel, Message
from effect_broker.demo.agent.tool import (
    TOOL_NAME,
    TOOL_SCHEMA,
    BadArguments,
    ChargeOutcome,
    charge_order,
    parse_arguments,
)
from effect_broker.demo.agent.transcript import Transcript

SYSTEM = (
    "You are a billing assistant. To charge an order, call charge_order exactly once "
    "with the order id, the amount in minor units and the currency; then tell the user "
    "in one sentence what happened."
)
MAX_TURNS = 4


@dataclass
class AgentAnswer:
    """The model's final words and every charge its tool calls produced."""

    text: str | None
    charges: list[ChargeOutcome] = field(default_factory=list)


async def run_conversation(
    model: ChatModel, request: str, endpoint: str, transcript: Transcript
) -> AgentAnswer:
    """Let ``model`` handle ``request``; its ``charge_order`` calls go to ``endpoint``."""
    messages: list[Message] = [
        {"role": "system", "content": SYSTEM},
        {"role": "user", "content": request},
    ]
    transcript.say("user", request)
    answer = AgentAnswer(text=None)
    for _ in range(MAX_TURNS):
        turn = await model.complete(messages, [TOOL_SCHEMA])
        if not turn.tool_calls:
            answer.text = turn.text
            transcript.say("model", turn.text or "(no words)")
            return answer
        messages.append(_assistant(turn.text, turn.tool_calls))
        for call in turn.tool_calls:
            transcript.say("model", f"calls {call.name} {call.arguments}")
            result = await _run_tool(
                call.name, call.arguments, endpoint, transcript, answer
            )
            messages.append({"role": "tool", "tool_call_id": call.id, "content": result})
    transcript.say("agent", f"stopped after {MAX_TURNS} turns without a final answer")
    return answer


async def _run_tool(
    name: str, arguments: str, endpoint: str, transcript: Transcript, answer: AgentAnswer
) -> str:
    if name != TOOL_NAME:
        transcript.say("tool", f"there is no tool {name!r}")
        return json.dumps({"ok": False, "error": f"unknown tool {name}"})
    try:
        charge = parse_arguments(arguments)
    except BadArguments as exc:
        transcript.say("tool", f"refused the arguments: {exc}")
        return json.dumps({"ok": False, "error": str(exc)})
    outcome = await charge_order(endpoint, charge, transcript)
    answer.charges.append(outcome)
    return outcome.for_model()


def _assistant(text: str | None, calls: Any) -> Message:
    return {
        "role": "assistant",
        "content": text,
        "tool_calls": [
            {
                "id": call.id,
                "type": "function",
                "function": {"name": call.name, "arguments": call.arguments},
            }
            for call in calls
        ],
    }
