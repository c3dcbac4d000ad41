"""Traces reach a collector over OTLP, configured only by the standard variables.

A real ``effect-broker serve`` process exports to a small OTLP/HTTP receiver in this
test. One effect gives a server span continuing the client's trace, with a ledger child
and an upstream child whose context the target receives; a lost answer settled later by
the reconciler gives a span linked to that first request.
"""

from __future__ import annotations

import asyncio
import os
import re
import sys
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from pathlib import Path

from aiohttp import web
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
    ExportTraceServiceRequest,
    ExportTraceServiceResponse,
)

from effect_broker.crypto import MasterKey
from tests.integration.harness import request, serve_app, serve_handler
from tests.routes_yaml import one_idempotent_route
from tests.support import poll

CLIENT_TRACE = "4bf92f3577b34da6a3ce929d0e0e4736"
CLIENT_SPAN = "00f067aa0ba902b7"
BANNER = re.compile(r"effect-broker proxy on (http://\S+), admin on (http://\S+?),")


@dataclass(frozen=True)
class SpanSeen:
    name: str
    trace_id: str
    span_id: str
    parent_id: str
    links: tuple[tuple[str, str], ...]


@dataclass
class Collector:
    spans: list[SpanSeen] = field(default_factory=list)

    async def receive(self, request: web.Request) -> web.Response:
        export = ExportTraceServiceRequest.FromString(await request.read())
        for resource in export.resource_spans:
            for scope in resource.scope_spans:
                for span in scope.spans:
                    self.spans.append(
                        SpanSeen(
                            span.name,
                            span.trace_id.hex(),
                            span.span_id.hex(),
                            span.parent_span_id.hex(),
                            tuple(
                                (li.trace_id.hex(), li.span_id.hex()) for li in span.links
                            ),
                        )
                    )
        return web.Response(
            body=ExportTraceServiceResponse().SerializeToString(),
            content_type="application/x-protobuf",
        )

    def named(self, prefix: str) -> list[SpanSeen]:
        return [span for span in self.spans if span.name.startswith(prefix)]


class FirstAnswerLost:
    """The first request waits past the contract's timeout; later ones answer at once."""

    def __init__(self) -> None:
        self.traceparents: list[str] = []

    async def handle(self, request: web.Request) -> web.Response:
        self.traceparents.append(request.headers.get("traceparent", ""))
        if len(self.traceparents) == 1:
            await asyncio.sleep(1.0)
        return web.json_response({"id": "ch_1"}, status=201)


@asynccontextmanager
async def serve_process(env: dict[str, str]) -> AsyncIterator[str]:
    """``effect-broker serve`` in a child process; yields its proxy URL."""
    child = await asyncio.create_subprocess_exec(
        sys.executable,
        "-c",
        "from effect_broker.cli import main; main()",
        "serve",
        env={**os.environ, **env},
        stderr=asyncio.subprocess.PIPE,
    )
    try:
        assert child.stderr is not None
        async with asyncio.timeout(30):
            while not (found := BANNER.search((await child.stderr.readline()).decode())):
                assert child.returncode is None, "serve exited before it was ready"
        yield found.group(1)
    finally:
        child.terminate()
        await asyncio.wait_for(child.wait(), 10)


async def test_spans_reach_an_otlp_collector_and_the_reconciler_links_back(
    database_url: str, tmp_path: Path
) -> None:
    collector = Collector()
    receiver = web.Application()
    receiver.router.add_post("/v1/traces", collector.receive)
    target = FirstAnswerLost()
    async with serve_app(receiver) as otlp, serve_handler(target.handle) as upstream:
        routes = tmp_path / "routes.yaml"
        routes.write_text(
            one_idempotent_route(
                upstream, timeout="300ms", prefix="/pay", route="charges"
            )
        )
        env = {
            "EFFECT_BROKER_DATABASE_URL": database_url,
            "EFFECT_BROKER_MASTER_KEY": MasterKey.generate().to_base64(),
            "EFFECT_BROKER_ROUTES": str(routes),
            "EFFECT_BROKER_LISTEN": "127.0.0.1:0",
            "EFFECT_BROKER_ADMIN_LISTEN": "127.0.0.1:0",
            "OTEL_TRACES_EXPORTER": "otlp",
            "OTEL_EXPORTER_OTLP_ENDPOINT": otlp,
            "OTEL_BSP_SCHEDULE_DELAY": "100",
        }
        async with serve_process(env) as proxy:
            lost = await request(
                "POST",
                f"{proxy}/pay/v1/charges",
                headers={
                    "Operation-Key": "order-1:charge",
                    "Content-Type": "application/json",
                    "traceparent": f"00-{CLIENT_TRACE}-{CLIENT_SPAN}-01",
                },
                data=b'{"amount": 100}',
            )
            assert lost.status == 504

            await poll(
                lambda: (
                    bool(collector.named("reconcile charges"))
                    and len(collector.named("POST")) >= 2
                ),
                within=15,
                every=0.1,
                what=lambda: f"the reconciler's span; spans seen: {collector.spans}",
            )

    [server] = collector.named("effect charges")
    assert (server.trace_id, server.parent_id) == (CLIENT_TRACE, CLIENT_SPAN)
    [reserve] = collector.named("ledger reserve")
    assert (reserve.trace_id, reserve.parent_id) == (CLIENT_TRACE, server.span_id)
    first_send = next(s for s in collector.named("POST") if s.trace_id == CLIENT_TRACE)
    assert first_send.parent_id == server.span_id
    assert target.traceparents[0] == f"00-{CLIENT_TRACE}-{first_send.span_id}-01"
    reconcile = collector.named("reconcile charges")[0]
    assert reconcile.trace_id != CLIENT_TRACE  # its own trace, linked to the request's
    assert (CLIENT_TRACE, server.span_id) in reconcile.links
    resend = next(s for s in collector.named("POST") if s.trace_id == reconcile.trace_id)
    assert target.traceparents[1].split("-")[2] == resend.span_id
