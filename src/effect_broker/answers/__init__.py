"""What the adapters share between a client and the engine, written once.

``intake`` turns a request on a recorded route (an HTTP request or an MCP
``tools/call``) into the engine's ``Intent``; ``receipts`` answers retries of settled
effects from memory; ``table`` says what each ``Outcome`` tells a client and
``failures`` what each exception does; ``render`` frames either answer for the wire.
The proxy and the MCP endpoint import this package and the engine's public surface,
and keep only their framing.
"""

from effect_broker.answers.failures import failure_answer
from effect_broker.answers.intake import (
    MAX_OPERATION_KEY,
    Payload,
    check_length,
    fingerprint,
    intent,
    is_absolute_form,
    key_problem,
    operation_key,
    read_body,
)
from effect_broker.answers.receipts import (
    ReceiptCache,
    SettledReplay,
    cached,
    noted,
    prunable_at,
)
from effect_broker.answers.render import (
    as_bytes,
    as_jsonrpc,
    as_problem,
    as_response,
    stream_overflow,
)
from effect_broker.answers.table import (
    HTTP,
    MCP,
    SERVER_REQUEST_CUT,
    Answer,
    Relay,
    Words,
    answer_for,
    operator_answer,
)

__all__ = [
    "HTTP",
    "MAX_OPERATION_KEY",
    "MCP",
    "SERVER_REQUEST_CUT",
    "Answer",
    "Payload",
    "ReceiptCache",
    "Relay",
    "SettledReplay",
    "Words",
    "answer_for",
    "as_bytes",
    "as_jsonrpc",
    "as_problem",
    "as_response",
    "cached",
    "check_length",
    "failure_answer",
    "fingerprint",
    "intent",
    "is_absolute_form",
    "key_problem",
    "noted",
    "operation_key",
    "operator_answer",
    "prunable_at",
    "read_body",
    "stream_overflow",
]
