"""Where the proxy resumes a closed MCP call stream: the last event id and the
server's retry hint, read as an SSE client reads them."""

from __future__ import annotations

from effect_broker.mcp.resume import Cursor


def test_the_cursor_takes_the_last_id_and_retry_of_the_stream() -> None:
    events = b"id: 1\r\nretry: 250\r\ndata: \r\n\r\nid: 2\ndata: {}\n\n"
    assert Cursor().after(events) == Cursor("2", 250)


def test_an_event_without_an_id_keeps_the_previous_one() -> None:
    assert Cursor("7", 50).after(b"data: {}\n\n") == Cursor("7", 50)


def test_a_malformed_retry_or_an_id_with_nul_is_ignored() -> None:
    assert Cursor("3").after(b"retry: soon\nid: a\x00b\ndata: x\n\n") == Cursor("3")


def test_a_stream_without_ids_gives_nothing_to_resume_from() -> None:
    assert Cursor().after(b"data: {}\n\n").event_id is None
