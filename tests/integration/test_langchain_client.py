"""LangChain's ChatOpenAI through the proxy, in both modes, as an agent runs it.

Forward mode: only ``HTTP_PROXY`` is set (the SDK's HTTP client reads it) and the
model's base URL names the chat host; reverse mode: the base URL points at the
sidecar's route prefix. The operation key travels in ``default_headers``. Each mode
records the completion once at the local chat server and replays it to the retry,
byte for byte (the same completion id), without a second request upstream.
"""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest

from tests.integration.fake_chat import fake_chat
from tests.integration.harness import ledger_rows, running_broker

langchain_openai = pytest.importorskip("langchain_openai")

ROUTES = """\
version: 1
contracts:
  - name: chat.completion
    version: "1"
    safety: unsafe
    timeout: 5s
routes:
  - name: chat-forward
    match: {{method: POST, host: chat.internal, path: /v1/chat/completions}}
    upstream: {upstream}
    contract: chat.completion
  - name: chat-reverse
    match: {{method: POST, path: /chat/v1/chat/completions}}
    strip_prefix: /chat
    upstream: {upstream}
    contract: chat.completion
"""

MODES = {
    # mode: (the model's base URL, whether HTTP_PROXY names the proxy)
    "forward": ("http://chat.internal/v1", True),
    "reverse": ("{proxy}/chat/v1", False),
}


def ask(base_url: str, operation_key: str) -> Any:
    """One turn of a LangChain chat model, as an agent's code makes it."""
    model = langchain_openai.ChatOpenAI(
        model="gpt-test",
        base_url=base_url,
        api_key="sk-test",
        max_retries=0,
        default_headers={"Operation-Key": operation_key},
    )
    return model.invoke("Charge order 42 for 42 USD")


@pytest.mark.parametrize("mode", MODES)
async def test_langchain_records_a_completion_once_and_replays_it(
    database_url: str,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    mode: str,
) -> None:
    async with (
        fake_chat() as chat,
        running_broker(
            database_url, tmp_path, routes=lambda _: ROUTES.format(upstream=chat.url)
        ) as broker,
    ):
        base_url, proxied = MODES[mode]
        for name in ("NO_PROXY", "no_proxy", "ALL_PROXY", "all_proxy", "HTTPS_PROXY"):
            monkeypatch.delenv(name, raising=False)
        for name in ("HTTP_PROXY", "http_proxy"):
            if proxied:
                monkeypatch.setenv(name, broker.proxy_url)
            else:
                monkeypatch.delenv(name, raising=False)
        url = base_url.format(proxy=broker.proxy_url)
        # Blocking SDK calls: in a thread, so the in-process servers keep serving.
        first = await asyncio.to_thread(ask, url, f"{mode}:turn-1")
        retry = await asyncio.to_thread(ask, url, f"{mode}:turn-1")
        rows = await ledger_rows(database_url)
    assert len(chat.requests) == 1, chat.requests
    assert chat.requests[0]["body"]["model"] == "gpt-test"
    assert first.tool_calls and first.tool_calls[0]["name"] == "charge_order"
    assert retry.tool_calls == first.tool_calls
    assert retry.response_metadata["id"] == first.response_metadata["id"] == "chatcmpl-1"
    assert [(r["operation_key"], r["status"]) for r in rows] == [
        (f"{mode}:turn-1", "succeeded")
    ]
