"""The pure MCP modules: message parsing, the key argument, the fingerprint, the
schema mirror, what an answer proves, and the routes.yaml block."""

from __future__ import annotations

import json
import uuid
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from effect_broker.config.contracts import Contract
from effect_broker.config.routes_file import parse_routes
from effect_broker.engine.messages import StoredRequest, StoredResponse
from effect_broker.engine.protocol import COMPLETE
from effect_broker.errors import ConfigError
from effect_broker.mcp.answers import McpProtocol
from effect_broker.mcp.calls import fingerprint_body, take_operation_key, tool_call
from effect_broker.mcp.jsonrpc import (
    HEADER_MISMATCH,
    Refusal,
    check_routing_headers,
    find_response,
    parse_message,
    replace_sse_response,
    revision_of,
    shaped_for,
)
from effect_broker.mcp.tools_schema import mirror_tools
from effect_broker.models import Effect, EffectStatus, SafetyClass

CHARGE = Contract("billing.charge", "1", SafetyClass.IDEMPOTENT, "Idempotency-Key")


def message(**params: Any) -> bytes:
    return json.dumps(
        {"jsonrpc": "2.0", "id": 7, "method": "tools/call", "params": params}
    ).encode()


def test_fingerprint_ignores_id_meta_and_key() -> None:
    one = tool_call(parse_message(message(name="t", arguments={"a": 1, "k": "x"})))
    two_body = json.loads(message(name="t", arguments={"k": "x", "a": 1.0}))
    two_body.update(id="other")
    two_body["params"]["_meta"] = {"progressToken": 3}
    two = tool_call(parse_message(json.dumps(two_body).encode()))
    key_one, rest_one = take_operation_key(one, "k", None)
    key_two, rest_two = take_operation_key(two, "k", None)
    assert key_one == key_two == "x" and rest_one == {"a": 1}
    assert fingerprint_body(one, rest_one) == fingerprint_body(two, rest_two)
    other = tool_call(parse_message(message(name="u", arguments={"a": 1})))
    assert fingerprint_body(other, {"a": 1}) != fingerprint_body(one, rest_one)


@pytest.mark.parametrize(
    ("body", "code"),
    [
        (b"[]", -32600),
        (b"42", -32600),
        (b'{"jsonrpc": "2.0", "id": 1, "id": 2, "method": "x"}', -32700),
        (b'{"jsonrpc": "1.0", "id": 1, "method": "x"}', -32600),
        (b"{nope", -32700),
    ],
)
def test_unreadable_messages_are_refused(body: bytes, code: int) -> None:
    with pytest.raises(Refusal) as refused:
        parse_message(body)
    assert refused.value.code == code


def test_key_rules() -> None:
    call = tool_call(parse_message(message(name="t", arguments={"a": 1})))
    with pytest.raises(Refusal, match="add the argument 'operation_key'"):
        take_operation_key(call, "operation_key", None)
    assert take_operation_key(call, "operation_key", "from-header")[0] == "from-header"
    both = tool_call(parse_message(message(name="t", arguments={"operation_key": "a"})))
    with pytest.raises(Refusal, match="disagree"):
        take_operation_key(both, "operation_key", "b")
    bad = tool_call(parse_message(message(name="t", arguments={"operation_key": "a\n"})))
    with pytest.raises(Refusal, match="control"):
        take_operation_key(bad, "operation_key", None)


def test_routing_headers_must_agree() -> None:
    parsed = parse_message(message(name="charge", arguments={}))
    check_routing_headers(parsed, "tools/call", "charge")
    check_routing_headers(parsed, "tools/call", "=?base64?Y2hhcmdl?=")
    with pytest.raises(Refusal):
        check_routing_headers(parsed, "tools/call", "other")
    with pytest.raises(Refusal):
        check_routing_headers(parsed, "ping", None)


def test_mirror_requires_key_on_mutating_tools_only() -> None:
    result = {
        "tools": [
            {"name": "charge", "inputSchema": {"type": "object", "required": ["a"]}},
            {"name": "read", "inputSchema": {"type": "object"}},
        ],
        "nextCursor": "c",
    }
    mirrored = mirror_tools(result, {"charge": CHARGE}, "operation_key")
    charge, read = mirrored["tools"]
    assert charge["inputSchema"]["required"] == ["a", "operation_key"]
    assert charge["inputSchema"]["properties"]["operation_key"]["type"] == "string"
    assert read == result["tools"][1] and mirrored["nextCursor"] == "c"


def effect(attempts: int = 1, safety: SafetyClass = SafetyClass.UNSAFE) -> Effect:
    now = datetime.now(UTC)
    fields: dict[str, Any] = {name: None for name in Effect.__dataclass_fields__}
    fields.update(
        effect_id=uuid.uuid4(),
        tenant_id="t",
        operation_key="k",
        safety=safety,
        status=EffectStatus.DISPATCHING,
        attempts=attempts,
        version=1,
        created_at=now,
        updated_at=now,
    )
    return Effect(**fields)


def sse(document: dict[str, Any]) -> StoredResponse:
    body = b"event: message\ndata: " + json.dumps(document).encode() + b"\n\n"
    return StoredResponse(200, "OK", [("Content-Type", "text/event-stream")], body)


@pytest.mark.parametrize(
    ("answer", "status"),
    [
        ({"result": {"content": []}}, EffectStatus.SUCCEEDED),
        ({"result": {"content": [], "isError": True}}, EffectStatus.FAILED_FINAL),
        ({"result": {"resultType": "input_required"}}, EffectStatus.RETRYABLE),
        ({"error": {"code": -32602, "message": "x"}}, EffectStatus.FAILED_FINAL),
        ({"error": {"code": -32603, "message": "x"}}, EffectStatus.OUTCOME_UNKNOWN),
    ],
)
def test_what_an_answer_proves(answer: dict[str, Any], status: EffectStatus) -> None:
    response = sse({"jsonrpc": "2.0", "id": 1, **answer})
    assert McpProtocol().judge(response, effect(), CHARGE) is status


def test_input_required_is_never_final() -> None:
    response = sse(
        {"jsonrpc": "2.0", "id": 1, "result": {"resultType": "input_required"}}
    )
    late = effect(attempts=5)
    assert McpProtocol().judge(response, late, CHARGE) is EffectStatus.OUTCOME_UNKNOWN


def test_stream_without_answer_is_unknown() -> None:
    notice = sse({"jsonrpc": "2.0", "method": "notifications/progress", "params": {}})
    assert find_response("text/event-stream", notice.body) is None
    assert McpProtocol().judge(notice, effect(), CHARGE) is EffectStatus.OUTCOME_UNKNOWN


SSE = "text/event-stream; charset=utf-8"


def event(document: dict[str, Any]) -> bytes:
    return b"event: message\r\ndata: " + json.dumps(document).encode() + b"\r\n\r\n"


ELICIT = {"jsonrpc": "2.0", "id": 0, "method": "elicitation/create", "params": {}}
PROGRESS = {"jsonrpc": "2.0", "method": "notifications/progress", "params": {}}
RESULT = {"jsonrpc": "2.0", "id": 1, "result": {"content": []}}


def call(request_id: object = 1) -> StoredRequest:
    body = json.dumps(
        {"jsonrpc": "2.0", "id": request_id, "method": "tools/call", "params": {}}
    )
    return StoredRequest("POST", "http://x/mcp", [], body.encode())


def test_the_watch_stops_at_a_server_request_split_across_chunks() -> None:
    watch = McpProtocol().watch(call())
    stream = event(PROGRESS) + event(ELICIT)
    cut = len(event(PROGRESS)) + 30  # mid-event, then mid-CRLF of the last blank line
    chunks = [stream[:cut], stream[cut:-1], stream[-1:]]
    reasons = [watch(SSE, chunk) for chunk in chunks]
    assert reasons[:2] == [None, None]
    assert reasons[2] is not None and reasons[2].endswith("elicitation/create")


def test_the_watch_stops_at_the_calls_response_and_reads_json_to_its_end() -> None:
    """The response for the call's id is the whole answer, even on a stream the
    server keeps open: the read ends there (``COMPLETE``, no detail)."""
    answered = McpProtocol().watch(call())
    assert answered(SSE, event(PROGRESS) + event(RESULT)[:-2]) is None
    assert answered(SSE, event(RESULT)[-2:]) == COMPLETE == ""
    json_answer = McpProtocol().watch(call())
    assert json_answer("application/json", json.dumps(ELICIT).encode()) is None
    notified = McpProtocol().watch(call())
    assert notified(SSE, event(PROGRESS) * 3) is None


@pytest.mark.parametrize(("sent", "answered_as"), [(1, "1"), ("7", 7), ("a", "a")])
def test_the_calls_response_is_known_by_its_id_as_the_sdks_correlate_it(
    sent: object, answered_as: object
) -> None:
    watch = McpProtocol().watch(call(sent))
    other = {**RESULT, "id": "someone-else"}
    assert watch(SSE, event(other)) is None  # another id's response: read on
    assert watch(SSE, event({**RESULT, "id": answered_as})) == COMPLETE


def test_idempotency_argument_gets_the_derived_key() -> None:
    contract = Contract(
        "r", "1", SafetyClass.IDEMPOTENT, idempotency_argument="idem", key_retention=None
    )
    request = StoredRequest("POST", "http://x/mcp", [], message(name="t", arguments={}))
    sent = McpProtocol().with_key(request, contract, "derived")
    assert json.loads(sent.body)["params"]["arguments"] == {"idem": "derived"}


ROUTES = """\
version: 1
contracts:
  - {{name: c, version: "1", safety: unsafe}}
routes:
  - name: m
    match: {{path: /mcp{method}}}
    upstream: http://127.0.0.1:9
{extra}"""


@pytest.mark.parametrize(
    ("method", "extra", "error"),
    [
        ("", "    mcp: {tools: {t: {contract: nope}}}\n", "no contract named 'nope'"),
        (", method: POST", "    mcp: {tools: {t: {contract: c}}}\n", "neither contract"),
        ("", "    contract: c\n", "match.method and contract"),
        ("", "    mcp: {tools: {t: {contract: c}}, read_only: [t]}\n", "both"),
    ],
)
def test_mcp_route_config_errors(method: str, extra: str, error: str) -> None:
    with pytest.raises(ConfigError, match=error):
        parse_routes(ROUTES.format(method=method, extra=extra), source="r.yaml")


def test_mcp_route_config() -> None:
    text = ROUTES.format(
        method="", extra="    mcp: {tools: {t: {contract: c}}, read_only: [r]}\n"
    )
    [route] = parse_routes(text, source="r.yaml").routes
    assert route.mcp is not None and route.mcp.unclassified == "reject"
    assert route.match.methods == {"POST", "GET", "DELETE"}
    assert [bound.contract.name for bound in route.bound_routes()] == ["c"]
    assert timedelta(0) < route.mcp.tools["t"].timeout


def test_the_revision_that_defines_the_routing_headers_requires_them() -> None:
    parsed = parse_message(
        json.dumps(
            {
                "jsonrpc": "2.0",
                "id": 1,
                "method": "tools/call",
                "params": {
                    "name": "charge",
                    "_meta": {"io.modelcontextprotocol/protocolVersion": "2026-07-28"},
                },
            }
        ).encode()
    )
    revision = revision_of(parsed, None)
    assert revision == "2026-07-28"
    assert revision_of(parsed, "2025-11-25") == "2025-11-25"
    check_routing_headers(parsed, "tools/call", "charge", revision=revision)
    for method, name in (("tools/call", None), (None, "charge")):
        with pytest.raises(Refusal) as refused:
            check_routing_headers(parsed, method, name, revision=revision)
        assert refused.value.code == HEADER_MISMATCH
    # Earlier revisions (and clients that name none) may leave them out.
    check_routing_headers(parsed, None, None, revision="2025-11-25")
    check_routing_headers(parsed, None, None)


def test_an_sse_answer_keeps_its_priming_event_when_its_response_is_replaced() -> None:
    body = (
        b"id: e-1\r\nretry: 500\r\ndata: \r\n\r\n"
        b"event: message\r\nid: e-2\r\n"
        b'data: {"jsonrpc":"2.0","id":3,"result":{"tools":[]}}\r\n\r\n'
    )
    replaced = replace_sse_response(body, {"jsonrpc": "2.0", "id": 3, "result": {"x": 1}})
    assert replaced is not None
    assert replaced.startswith(b"id: e-1\nretry: 500\ndata: \n\n")
    assert b"event: message\nid: e-2\n" in replaced
    assert find_response("text/event-stream", replaced) == {
        "jsonrpc": "2.0",
        "id": 3,
        "result": {"x": 1},
    }
    assert replace_sse_response(b"id: 1\ndata: \n\n", {"id": 1}) is None


def test_a_recorded_result_takes_the_shape_of_the_asking_revision() -> None:
    legacy = {"content": [], "isError": False}
    modern = {**legacy, "resultType": "complete"}
    assert shaped_for(legacy, "2026-07-28") == modern
    assert shaped_for(modern, "2026-07-28") == modern
    assert shaped_for(modern, "2025-11-25") == legacy
    assert shaped_for(modern, None) == legacy
    asking = {"resultType": "input_required"}
    assert shaped_for(asking, "2025-11-25") == asking  # never dressed as complete
