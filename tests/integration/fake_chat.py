"""A local stand-in for a chat-completions API: it asks for the charge, then reports.

It speaks the wire format the official ``openai`` SDK reads, under any path prefix (so
one server plays OpenAI at ``/v1`` and Grok at ``/grok/v1``), and records every request
so a test can check what the SDK sent: the key, the model, the tool, the tool's result.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from typing import Any

from aiohttp import web

CHARGE_ARGUMENTS = {"order_id": "order-42", "amount": 4200, "currency": "usd"}


@dataclass
class FakeChat:
    url: str = ""
    requests: list[dict[str, Any]] = field(default_factory=list)

    async def complete(self, request: web.Request) -> web.Response:
        body = await request.json()
        self.requests.append(
            {
                "path": request.path,
                "authorization": request.headers.get("Authorization"),
                "body": body,
            }
        )
        tool_results = [m for m in body["messages"] if m.get("role") == "tool"]
        if tool_results:
            message: dict[str, Any] = {
                "role": "assistant",
                "content": "Charged order-42; the tool said "
                + tool_results[-1]["content"],
            }
            finish = "stop"
        else:
            message = {
                "role": "assistant",
                "content": None,
                "tool_calls": [
                    {
                        "id": "call_fake_1",
                        "type": "function",
                        "function": {
                            "name": "charge_order",
                            "arguments": json.dumps(CHARGE_ARGUMENTS),
                        },
                    }
                ],
            }
            finish = "tool_calls"
        return web.json_response(
            {
                "id": f"chatcmpl-{len(self.requests)}",
                "object": "chat.completion",
                "created": 0,
                "model": body["model"],
                "choices": [{"index": 0, "message": message, "finish_reason": finish}],
            }
        )


@asynccontextmanager
async def fake_chat() -> AsyncIterator[FakeChat]:
    fake = FakeChat()
    app = web.Application()
    app.router.add_post("/{prefix:.*}chat/completions", fake.complete)
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    host, port = runner.addresses[0][:2]
    fake.url = f"http://{host}:{port}"
    try:
        yield fake
    finally:
        await runner.cleanup()
