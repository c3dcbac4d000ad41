"""JSON-RPC 2.0 messages of the MCP Streamable HTTP transport, parsed strictly (no I/O).

The proxy only ever looks inside a POST body to classify it: one JSON object, a
request, notification or response. Anything else (a batch array, a scalar, a
``tools/call`` without a tool name) is refused before a byte is forwarded: a message
the proxy cannot classify could be an unrecorded effect.
"""

from __future__ import annotations

import base64
import binascii
import json
import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from effect_broker.canonical import canonical_json
from effect_broker.errors import CanonicalizationError

RequestId = str | int

PARSE_ERROR = -32700
INVALID_REQUEST = -32600
METHOD_NOT_FOUND = -32601
INVALID_PARAMS = -32602
INTERNAL_ERROR = -32603
HEADER_MISMATCH = -32020  # the 2026-07-28 revision's code for headers vs body
# Server-defined codes (-32000..-32099) for what the proxy itself answers.
TOOL_REFUSED = -32010
PAYLOAD_MISMATCH = -32011
IN_FLIGHT = -32012
OUTCOME_UNKNOWN = -32013
NOT_SENT = -32014
BODY_TOO_LARGE = -32015
RESOLVED_BY_OPERATOR = -32016
PROXY_ERROR = -32017

PROGRESS = "notifications/progress"
# Methods whose Mcp-Name header names a body parameter (sessionless revision).
NAME_BEARING = {"tools/call": "name", "prompts/get": "name", "resources/read": "uri"}
_BASE64_VALUE = re.compile(r"=\?base64\?(?P<payload>[A-Za-z0-9+/]*={0,2})\?=")


class Refusal(Exception):
    """A message refused before anything was forwarded, as a JSON-RPC error."""

    def __init__(
        self, code: int, message: str, request_id: RequestId | None = None
    ) -> None:
        super().__init__(message)
        self.code = code
        self.message = message
        self.request_id = request_id


@dataclass(frozen=True, slots=True)
class Message:
    """One JSON-RPC message: ``method`` is None for a response to a server request,
    ``id`` is None for a notification."""

    body: dict[str, Any]
    method: str | None
    id: RequestId | None

    @property
    def is_request(self) -> bool:
        return self.method is not None and "id" in self.body


def parse_message(body: bytes) -> Message:
    """The POST body as one message, or a ``Refusal`` saying what is wrong with it."""
    try:
        value = json.loads(canonical_json(body))  # strict: duplicates, NaN, UTF-8
    except CanonicalizationError as exc:
        raise Refusal(PARSE_ERROR, f"the body is not valid JSON: {exc.message}") from None
    if isinstance(value, list):
        raise Refusal(
            INVALID_REQUEST,
            "JSON-RPC batches are not accepted here: send one message per request",
        )
    if not isinstance(value, dict):
        raise Refusal(
            INVALID_REQUEST, "the body must be one JSON-RPC message (an object)"
        )
    request_id = value.get("id")
    if request_id is not None and (
        isinstance(request_id, bool) or not isinstance(request_id, str | int)
    ):
        raise Refusal(INVALID_REQUEST, "a JSON-RPC id is a string or an integer")
    if value.get("jsonrpc") != "2.0":
        raise Refusal(
            INVALID_REQUEST, 'a JSON-RPC message has "jsonrpc": "2.0"', request_id
        )
    method = value.get("method")
    if method is None:
        if "id" not in value or ("result" not in value and "error" not in value):
            raise Refusal(
                INVALID_REQUEST,
                "a message without a method must be a response",
                request_id,
            )
        return Message(value, None, request_id)
    if not isinstance(method, str) or not method:
        raise Refusal(
            INVALID_REQUEST, "the method must be a non-empty string", request_id
        )
    return Message(value, method, request_id)


def correlated_id(request_id: RequestId) -> RequestId:
    """The id as the MCP SDKs correlate it: a string that Python's ``int`` reads as an
    integer (``"2"``, ``" 2"``, ``"+2"``) is that integer. JSON-RPC itself keeps ``2``
    and ``"2"`` apart, but a server built on the official SDK takes a cancellation
    naming ``"2"`` for its running call ``2``; so must the proxy, or it forwards a
    cancellation that stops a recorded call halfway."""
    if isinstance(request_id, str):
        try:
            return int(request_id)
        except ValueError:  # not an integer (or longer than Python reads): a string
            return request_id
    return request_id


def find_response(content_type: str | None, body: bytes) -> dict[str, Any] | None:
    """The JSON-RPC response in an answer sent as JSON or as an SSE stream."""
    if _is_sse(content_type):
        for data in sse_data(body):
            found = _response(data)
            if found is not None:
                return found
        return None
    return _response(body)


class ServerRequestWatch:
    """Watches one SSE answer to a ``tools/call``, chunk by chunk, for two things.

    A request the server sends the client mid-call (``elicitation/create``,
    ``sampling/createMessage``, ``roots/list``) before any response: the server then
    waits for the client's answer, which a recorded call cannot relay. Its method is
    returned the first time it appears; notifications (progress, logs) pass, and each
    progress notification is given to ``on_progress`` (the client's relay) as it is.

    The response for the call's own id (``call_id``; any response when it is None):
    it is the whole answer, so ``answered`` turns true and the reader may stop there.
    A server may keep the stream open after it, and waiting for the end would only
    wait for the timeout and lose an answer already received.
    """

    def __init__(
        self,
        call_id: RequestId | None = None,
        on_progress: Callable[[bytes], None] | None = None,
    ) -> None:
        self._pending = b""  # the stream's bytes after its last complete event
        self._call_id = None if call_id is None else correlated_id(call_id)
        self._on_progress = on_progress  # given each notifications/progress message
        self.answered = False

    def __call__(self, content_type: str | None, chunk: bytes) -> str | None:
        if self.answered or not _is_sse(content_type):
            return None
        text = (self._pending + chunk).replace(b"\r\n", b"\n")
        complete, _, self._pending = text.rpartition(b"\n\n")
        for data in sse_data(complete):
            try:
                value = json.loads(data)
            except (ValueError, RecursionError):
                continue
            if not isinstance(value, dict):
                continue
            if "result" in value or "error" in value:
                if self._answers_the_call(value.get("id")):
                    self.answered = True
                    return None
                continue
            method = value.get("method")
            if isinstance(method, str) and "id" in value:
                return method
            if method == PROGRESS and self._on_progress is not None:
                self._on_progress(data)
        return None

    def _answers_the_call(self, response_id: object) -> bool:
        if self._call_id is None:
            return True
        if isinstance(response_id, bool) or not isinstance(response_id, str | int):
            return False
        return correlated_id(response_id) == self._call_id


def _is_sse(content_type: str | None) -> bool:
    return (content_type or "").split(";")[0].strip().lower() == "text/event-stream"


def sse_data(body: bytes) -> list[bytes]:
    """The ``data`` of each event of an SSE stream (multi-line data joined)."""
    events: list[bytes] = []
    lines: list[bytes] = []
    for raw in body.replace(b"\r\n", b"\n").split(b"\n"):
        if not raw:
            if lines:
                events.append(b"\n".join(lines))
            lines = []
        elif raw.startswith(b"data:"):
            lines.append(raw[5:].removeprefix(b" "))
    if lines:
        events.append(b"\n".join(lines))
    return events


def replace_sse_response(body: bytes, answer: dict[str, Any]) -> bytes | None:
    """``body``, an SSE stream, with the data of the event that carries the JSON-RPC
    response replaced by ``answer``; every other event and field (a priming ``id:``
    and ``retry:``, notifications) kept as the server sent it. None if none does."""
    events = body.replace(b"\r\n", b"\n").split(b"\n\n")
    for index, event in enumerate(events):
        lines = event.split(b"\n")
        data = b"\n".join(
            line[5:].removeprefix(b" ") for line in lines if line.startswith(b"data:")
        )
        if not data or _response(data) is None:
            continue
        kept = [line for line in lines if line and not line.startswith(b"data:")]
        events[index] = b"\n".join([*kept, b"data: " + encode(answer)])
        return b"\n\n".join(events)
    return None


def is_sse(content_type: str | None) -> bool:
    """Whether an answer is an SSE stream."""
    return _is_sse(content_type)


def _response(data: bytes) -> dict[str, Any] | None:
    try:
        value = json.loads(data)
    except (ValueError, RecursionError):
        return None
    if (
        isinstance(value, dict)
        and "id" in value
        and ("result" in value or "error" in value)
    ):
        return value
    return None


def encode(document: dict[str, Any]) -> bytes:
    return json.dumps(document, separators=(",", ":")).encode()


def result_document(request_id: RequestId | None, answer: dict[str, Any]) -> bytes:
    """The stored answer's ``result`` or ``error`` under this request's own id."""
    out: dict[str, Any] = {"jsonrpc": "2.0", "id": request_id}
    if "error" in answer:
        out["error"] = answer["error"]
    else:
        out["result"] = answer.get("result")
    return encode(out)


#: The first revision whose POSTs must name themselves in Mcp-Method / Mcp-Name.
HEADERS_REQUIRED_FROM = "2026-07-28"
META_PROTOCOL_VERSION = "io.modelcontextprotocol/protocolVersion"


def shaped_for(result: Any, revision: str | None) -> Any:
    """A recorded ``result`` in the shape the asking client's revision requires,
    whichever revision recorded it: from 2026-07-28 every result names its
    ``resultType`` (absent meant ``complete`` before), and an earlier client is
    never handed the 2026 tag for a complete result."""
    if not isinstance(result, dict):
        return result
    if revision is not None and revision >= HEADERS_REQUIRED_FROM:
        return result if "resultType" in result else {**result, "resultType": "complete"}
    if result.get("resultType") == "complete":
        return {name: value for name, value in result.items() if name != "resultType"}
    return result


def revision_of(message: Message, version_header: str | None) -> str | None:
    """The protocol revision a message is sent under: its ``MCP-Protocol-Version``
    header, else the version in its ``params._meta`` (sessionless revision)."""
    if version_header:
        return version_header.strip()
    params = message.body.get("params")
    meta = params.get("_meta") if isinstance(params, dict) else None
    version = meta.get(META_PROTOCOL_VERSION) if isinstance(meta, dict) else None
    return version if isinstance(version, str) else None


def check_routing_headers(
    message: Message,
    method_header: str | None,
    name_header: str | None,
    *,
    revision: str | None = None,
) -> None:
    """The sessionless revision names the call in ``Mcp-Method`` and ``Mcp-Name``;
    an intermediary that routes by them must not see one call while the server runs
    another, so a header that disagrees with the body is refused, and from that
    revision on (``revision``) so is a request (not a response or notification
    without a method) that leaves one out."""
    required = (
        revision is not None
        and revision >= HEADERS_REQUIRED_FROM
        and message.method is not None
    )
    if required and method_header is None:
        raise Refusal(
            HEADER_MISMATCH,
            f"revision {revision[:20] if revision else ''} requires the Mcp-Method "
            f"header on every POST; send 'Mcp-Method: {str(message.method)[:80]}'",
            message.id,
        )
    if method_header is not None and method_header != message.method:
        raise Refusal(
            HEADER_MISMATCH,
            f"the Mcp-Method header {method_header[:80]!r} does not match the body's "
            f"method {str(message.method)[:80]!r}",
            message.id,
        )
    key = NAME_BEARING.get(message.method or "")
    if key is None:
        return
    params = message.body.get("params")
    value = params.get(key) if isinstance(params, dict) else None
    if name_header is None:
        if required and value is not None:
            raise Refusal(
                HEADER_MISMATCH,
                f"revision {revision[:20] if revision else ''} requires the Mcp-Name "
                f"header on {message.method}, naming params.{key}",
                message.id,
            )
        return
    if _header_text(name_header) != value:
        raise Refusal(
            HEADER_MISMATCH,
            f"the Mcp-Name header does not match the body's params.{key}",
            message.id,
        )


def _header_text(value: str) -> str | None:
    """A header value, decoded from the ``=?base64?...?=`` form non-ASCII needs."""
    found = _BASE64_VALUE.fullmatch(value)
    if found is None:
        return value
    try:
        return base64.b64decode(found["payload"], validate=True).decode("utf-8")
    except (binascii.Error, UnicodeDecodeError):
        return None
