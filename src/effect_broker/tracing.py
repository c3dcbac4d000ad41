"""OpenTelemetry spans for recorded effects, configured the standard way.

Each request on a matched route becomes one server span, a child of the client's
``traceparent`` when it sent one, with a child span per ledger call and one for the
upstream request, which carries the upstream span's context on to the target: a trace
shows agent → effect-broker → ledger and target. The server span's context is stored
with the effect, so a reconciler that settles it an hour later starts a span linked to
it. Spans hold the operation key's digest, never the key, the derived key, a payload or
a secret.

Configuration is only the standard ``OTEL_*`` variables: ``OTEL_TRACES_EXPORTER``
(``none``, the default, ``console`` or ``otlp``), ``OTEL_EXPORTER_OTLP_PROTOCOL``
(``http/protobuf``, the default, or ``grpc``), ``OTEL_EXPORTER_OTLP_ENDPOINT`` and
``_HEADERS``, ``OTEL_SERVICE_NAME``, ``OTEL_RESOURCE_ATTRIBUTES``, ``OTEL_TRACES_SAMPLER``
(read by the SDK and the exporters themselves). Without an exporter the tracer is the
API's no-op one and costs next to nothing.
"""

from __future__ import annotations

import hashlib
import os
from collections.abc import Iterable, Iterator, Mapping
from contextlib import contextmanager

from opentelemetry import propagate, trace
from opentelemetry.context import Context
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import (
    BatchSpanProcessor,
    ConsoleSpanExporter,
    SpanExporter,
)
from opentelemetry.trace import Link, ProxyTracerProvider, Span, SpanKind

TRACE_HEADERS = frozenset({"traceparent", "tracestate"})
EXPORTERS = ("none", "console", "otlp")
PROTOCOLS = ("http/protobuf", "grpc")

tracer = trace.get_tracer("effect_broker")


def configure(environ: Mapping[str, str] | None = None) -> TracerProvider | None:
    """Install a tracer provider as the ``OTEL_*`` variables say; None for ``none``.

    ``EFFECT_BROKER_TRACES`` is still read when ``OTEL_TRACES_EXPORTER`` is unset, for
    configurations written before the standard variables were supported.
    """
    env = os.environ if environ is None else environ
    name = (
        env.get("OTEL_TRACES_EXPORTER") or env.get("EFFECT_BROKER_TRACES") or "none"
    ).strip()
    if name not in EXPORTERS:
        raise ValueError(
            f"OTEL_TRACES_EXPORTER must be one of {', '.join(EXPORTERS)}, not {name!r}"
        )
    if name == "none":
        return None
    provider = TracerProvider(resource=Resource.create({"service.name": "effect-broker"}))
    provider.add_span_processor(BatchSpanProcessor(_exporter(name, env)))
    install(provider)
    return provider


def install(provider: TracerProvider) -> None:
    """Make ``provider`` the process's tracer provider (``configure`` does, and a test
    recording spans): from here on every request is traced."""
    global _installed
    trace.set_tracer_provider(provider)
    _installed = True


def _exporter(name: str, env: Mapping[str, str]) -> SpanExporter:
    if name == "console":
        return ConsoleSpanExporter()
    protocol = (
        env.get("OTEL_EXPORTER_OTLP_TRACES_PROTOCOL")
        or env.get("OTEL_EXPORTER_OTLP_PROTOCOL")
        or "http/protobuf"
    ).strip()
    if protocol == "grpc":
        from opentelemetry.exporter.otlp.proto.grpc.trace_exporter import (
            OTLPSpanExporter as GrpcExporter,
        )

        return GrpcExporter()
    if protocol != "http/protobuf":
        raise ValueError(
            f"OTEL_EXPORTER_OTLP_PROTOCOL must be one of {', '.join(PROTOCOLS)}, "
            f"not {protocol!r}"
        )
    from opentelemetry.exporter.otlp.proto.http.trace_exporter import (
        OTLPSpanExporter as HttpExporter,
    )

    return HttpExporter()


def incoming_context(headers: Mapping[str, str]) -> Context:
    return propagate.extract(headers)


#: Whether a tracer provider is installed: set by ``install``, or found installed
#: already when this module was first imported (an auto-instrumentation wrapper installs
#: one before the program starts). Installing one any other way is not seen here.
_installed = not isinstance(trace.get_tracer_provider(), ProxyTracerProvider)


def recording() -> bool:
    """Whether a tracer provider is installed: without one every span is a no-op that
    still costs a context switch of its own. A flag, read several times per request:
    the API's own answer reads the environment each time (a KeyError raised and caught
    twice, about 2 µs) until a provider exists."""
    return _installed


def untraced(headers: Mapping[str, str] | None = None) -> bool:
    """Nothing would be recorded and there is no trace to continue (none in ``headers``
    for a request arriving, none current otherwise): the request path then makes no
    spans at all, which with no provider would only have passed the client's trace
    along."""
    if recording():
        return False
    if headers is not None:
        return "traceparent" not in headers
    return not trace.get_current_span().get_span_context().is_valid


def current_context_headers() -> dict[str, str]:
    """``traceparent`` (and ``tracestate``) of the current span; empty without one."""
    if not trace.get_current_span().get_span_context().is_valid:
        return {}
    carrier: dict[str, str] = {}
    propagate.inject(carrier)
    return carrier


def with_current_context(headers: Iterable[tuple[str, str]]) -> list[tuple[str, str]]:
    """The headers with ``traceparent``/``tracestate`` replaced by the current span's."""
    kept = [(name, value) for name, value in headers if name.lower() not in TRACE_HEADERS]
    return kept + list(current_context_headers().items())


def links_to(stored: object) -> list[Link]:
    """A link to the span whose context was stored with an effect, if any was."""
    if not isinstance(stored, Mapping):
        return []
    context = trace.get_current_span(propagate.extract(dict(stored))).get_span_context()
    return [Link(context)] if context.is_valid else []


@contextmanager
def ledger_span(operation: str) -> Iterator[Span]:
    """One ledger call: the statement's name, never its parameters."""
    with tracer.start_as_current_span(
        f"ledger {operation}",
        kind=SpanKind.CLIENT,
        attributes={"db.system.name": "postgresql", "db.operation.name": operation},
    ) as span:
        yield span


def key_digest(operation_key: str) -> str:
    """What logs and spans may say of an operation key: enough to correlate, no more."""
    # surrogatepass: a digest must never be the thing that fails on odd input.
    return hashlib.sha256(operation_key.encode("utf-8", "surrogatepass")).hexdigest()[:16]
