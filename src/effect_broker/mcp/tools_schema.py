"""The ``tools/list`` rewrite (pure): mutating tools require the operation key.

An agent learns what to send from the schema it is shown, so each configured mutating
tool's ``inputSchema`` gains a required string property for the key. Read-only and
unlisted tools are left exactly as the server described them.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from effect_broker.config.contracts import Contract

KEY_DESCRIPTION = (
    "Idempotency key for this side effect: a string naming this one intent (e.g. "
    "'order-42:charge'). Send the same value on every retry of the same intent, and a "
    "new value for a new intent; a repeated call with the same key returns the first "
    "result instead of acting twice."
)


def mirror_tools(result: Any, tools: Mapping[str, Contract], argument: str) -> Any:
    """A ``tools/list`` result with the key argument required on each mutating tool;
    anything not shaped like a tools list is returned unchanged."""
    if not isinstance(result, dict) or not isinstance(result.get("tools"), list):
        return result
    listed = [
        _with_key(tool, argument)
        if isinstance(tool, dict) and tool.get("name") in tools
        else tool
        for tool in result["tools"]
    ]
    return {**result, "tools": listed}


def _with_key(tool: dict[str, Any], argument: str) -> dict[str, Any]:
    schema = tool.get("inputSchema")
    schema = dict(schema) if isinstance(schema, dict) else {"type": "object"}
    properties = schema.get("properties")
    properties = dict(properties) if isinstance(properties, dict) else {}
    properties[argument] = {
        "type": "string",
        "minLength": 1,
        "maxLength": 255,
        "description": KEY_DESCRIPTION,
    }
    required = schema.get("required")
    required = (
        [name for name in required if name != argument]
        if isinstance(required, list)
        else []
    )
    schema["properties"] = properties
    schema["required"] = [*required, argument]
    return {**tool, "inputSchema": schema}
