"""Client-side helpers for agents and operators, on the standard library alone.

``operation_key`` builds a key that stays the same across retries of one intent (and
refuses parts that would make every retry look new); ``operation`` with the ``requests``
and ``httpx`` hooks puts it on outgoing requests; ``EffectsClient`` speaks to the admin
API. Importing this package pulls in none of the proxy's own dependencies, so an agent
can install it with ``pip install effect-broker`` alone (the server is the ``server``
extra), beside whatever MCP SDK or HTTP stack it already pins.
"""

from effect_broker.client.admin import AdminProblem, AdminUnreachable, EffectsClient
from effect_broker.client.hooks import (
    current_operation_key,
    install_httpx,
    install_requests,
    operation,
)
from effect_broker.client.keys import (
    RandomPart,
    langgraph_key,
    openai_agents_key,
    operation_key,
    stable,
    temporal_key,
)

__all__ = [
    "AdminProblem",
    "AdminUnreachable",
    "EffectsClient",
    "RandomPart",
    "current_operation_key",
    "install_httpx",
    "install_requests",
    "langgraph_key",
    "openai_agents_key",
    "operation",
    "operation_key",
    "stable",
    "temporal_key",
]
