"""OpenTelemetry spans for recorded effects, and ``traceparent`` carried upstream.

Each request on a matched route becomes one server span, a child of the client's
``traceparent`` when it sent one; the upstream request carries this span's context, so
a trace shows agent → effect-broker → target. Spans hold the operation key's digest,
never the key, a payload or a secret. Without an exporter configured the tracer is the
API's no-op one and costs next to nothing; ``EFFECT_BROKER_TRACES=console`` prints spans.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable, Mapping

from opentelemetry import propagate, trace
from opentelemetry.context import Context

TRACE_HEADERS = frozenset({"traceparent", "tracestate"})

tracer = trace.get_tracer("effect_broker")


def configure(exporter: str) -> None:
    """Install an SDK tracer provider for ``console``; ``none`` keeps the no-op one."""
    if exporter == "none":
        return
    if exporter != "console":
        raise ValueError(
            f"EFFECT_BROKER_TRACES must be none or console, not {exporter!r}"
        )
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import BatchSpanProcessor, ConsoleSpanExporter

    provider = TracerProvider()
    provider.add_span_processor(BatchSpanProcessor(ConsoleSpanExporter()))
    trace.set_tracer_provider(provider)


def incoming_context(headers: Mapping[str, str]) -> Context:
    return propagate.extract(headers)


def with_current_context(headers: Iterable[tuple[str, str]]) -> list[tuple[str, str]]:
    """The headers with ``traceparent``/``tracestate`` replaced by the current span's."""
    carrier: dict[str, str] = {}
    propagate.inject(carrier)
    kept = [(name, value) for name, value in headers if name.lower() not in TRACE_HEADERS]
    return kept + list(carrier.items())


def key_digest(operation_key: str) -> str:
    """What logs and spans may say of an operation key: enough to correlate, no more."""
    # surrogatepass: a digest must never be the thing that fails on odd input.
    return hashlib.sha256(operation_key.encode("utf-8", "surrogatepass")).hexdigest()[:16]
