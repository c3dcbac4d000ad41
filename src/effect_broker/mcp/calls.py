"""A ``tools/call`` as an intent: the tool, its arguments and its operation key.

The MCP half of the shared intake (``effect_broker.answers.intake``): what the proxy
hashes for a tool call (the tool and its arguments, never the JSON-RPC id or
``_meta``), what it sends (the arguments without the operation key), and where the key
comes from (the argument the proxy added to the tool's schema, or the header); the key
is checked by the same rules as an HTTP ``Operation-Key``.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from effect_broker.answers import key_problem
from effect_broker.canonical import canonical_json
from effect_broker.mcp.jsonrpc import (
    INVALID_PARAMS,
    INVALID_REQUEST,
    Message,
    Refusal,
    RequestId,
)


@dataclass(frozen=True, slots=True)
class ToolCall:
    id: RequestId
    name: str
    arguments: dict[str, Any]


def tool_call(message: Message) -> ToolCall:
    """The name and arguments of a ``tools/call`` request."""
    if message.id is None:
        raise Refusal(INVALID_REQUEST, "tools/call is a request: it needs an id")
    params = message.body.get("params")
    if not isinstance(params, dict):
        raise Refusal(INVALID_PARAMS, "tools/call needs params: an object", message.id)
    name = params.get("name")
    if not isinstance(name, str) or not name:
        raise Refusal(
            INVALID_PARAMS, "tools/call needs params.name: the tool's name", message.id
        )
    arguments = params.get("arguments", {})
    if not isinstance(arguments, dict):
        raise Refusal(
            INVALID_PARAMS, "tools/call params.arguments must be an object", message.id
        )
    return ToolCall(message.id, name, arguments)


def take_operation_key(
    call: ToolCall, argument: str, header_value: str | None
) -> tuple[str, dict[str, Any]]:
    """The operation key and the arguments without it (what the target receives).

    The key comes from the argument the proxy added to the schema, or from the
    ``Operation-Key`` header; when both are sent they must agree.
    """
    rest = {name: value for name, value in call.arguments.items() if name != argument}
    given = call.arguments.get(argument)
    if given is not None and not isinstance(given, str):
        raise Refusal(
            INVALID_PARAMS, f"the argument {argument!r} must be a string", call.id
        )
    if given and header_value and given != header_value:
        raise Refusal(
            INVALID_PARAMS,
            f"the argument {argument!r} and the Operation-Key header disagree; send one",
            call.id,
        )
    key = given or header_value
    if not key:
        raise Refusal(
            INVALID_PARAMS,
            f"tool {call.name!r} has side effects: add the argument {argument!r}, a "
            "string naming this intent (e.g. 'order-42:charge'), and send the same "
            "value on every retry of it",
            call.id,
        )
    problem = key_problem(key, argument)
    if problem is not None:
        raise Refusal(INVALID_PARAMS, problem, call.id)
    return key, rest


def fingerprint_body(call: ToolCall, arguments: dict[str, Any]) -> bytes:
    """What binds a key to its intent: the tool and its arguments (RFC 8785), never the
    JSON-RPC id, ``_meta``, the session or the progress token, which change per try."""
    document = {"tool": call.name, "arguments": arguments}
    return canonical_json(json.dumps(document, ensure_ascii=False).encode())


def forwarded_body(message: Message, arguments: dict[str, Any]) -> bytes:
    """The request as the target receives it: the operation key argument removed."""
    params = dict(message.body["params"])
    params["arguments"] = arguments
    return json.dumps({**message.body, "params": params}).encode()
