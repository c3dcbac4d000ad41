"""The ``mcp`` block of a route in routes.yaml, as pydantic models.

Kept apart from ``routes_models`` so each stays short; the route model embeds it. A
tool's safety comes only from the contract named here, never from the tool's name,
description or annotations, which the server controls and may change at any time.
"""

from __future__ import annotations

from typing import Annotated

from pydantic import BaseModel, ConfigDict, Field, StringConstraints, model_validator

from effect_broker.config.contracts import (
    DEFAULT_OPERATION_KEY_ARGUMENT,
    McpUnclassified,
)

NAME_PATTERN = r"^[A-Za-z0-9][A-Za-z0-9._-]*$"
# MCP tool names: letters, digits, _ - . / (the spec's recommended set), 1-128 long.
TOOL_PATTERN = r"^[A-Za-z0-9_./-]{1,128}$"
ARGUMENT_PATTERN = r"^[A-Za-z_][A-Za-z0-9_-]{0,63}$"

ToolName = Annotated[str, StringConstraints(pattern=TOOL_PATTERN)]
ArgumentName = Annotated[str, StringConstraints(pattern=ARGUMENT_PATTERN)]


class _Section(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True)


class McpToolSection(_Section):
    """One mutating tool: every tools/call of it is an effect under this contract."""

    contract: Annotated[str, StringConstraints(pattern=NAME_PATTERN)] = Field(
        description="The name of a contract in this file."
    )


class McpSection(_Section):
    """An MCP (Streamable HTTP) endpoint: tools/call of a listed tool is an effect;
    everything else on the endpoint passes through unrecorded."""

    operation_key_argument: ArgumentName = Field(
        DEFAULT_OPERATION_KEY_ARGUMENT,
        description="The tool argument that carries the operation key; the proxy adds "
        "it to each mutating tool's inputSchema and strips it before forwarding.",
    )
    tools: dict[ToolName, McpToolSection] = Field(
        default_factory=dict,
        description="Mutating tools by name, each with its contract.",
    )
    read_only: list[ToolName] = Field(
        default_factory=list,
        description="Tools whose calls pass through unrecorded; listed by an operator, "
        "never inferred from the tool's annotations.",
    )
    unclassified: McpUnclassified = Field(
        "reject",
        description="reject: refuse tools/call of a tool in neither list with a "
        "JSON-RPC error; pass: forward it unrecorded.",
    )

    @model_validator(mode="after")
    def _disjoint(self) -> McpSection:
        both = sorted(set(self.tools) & set(self.read_only))
        if both:
            raise ValueError(
                f"tool(s) {', '.join(both)} are listed both as mutating (tools) and "
                "read_only; a tool is one or the other"
            )
        return self
