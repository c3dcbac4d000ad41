"""The engine: what it decides and records about effects, and the one face it shows.

Adapters (the proxy, MCP, the admin API, the CLI, the reconciler) and the composition
root import from here, never from a submodule: what is listed below is the engine's
public surface, and an import-linter contract keeps it that way.
"""

from effect_broker.engine.engine import Engine, Intent
from effect_broker.engine.ledger import LedgerReader
from effect_broker.engine.lookup import Finding, Kit, KitAnswer
from effect_broker.engine.messages import StoredRequest, StoredResponse
from effect_broker.engine.outcomes import refused_for_good, status_after_answer
from effect_broker.engine.owners import worker_name
from effect_broker.engine.probe import ProbeResult, ProbeVerdict, run_probe
from effect_broker.engine.protocol import COMPLETE, AnswerWatch
from effect_broker.engine.rekey import RotationReport, rotate, with_idempotency_root
from effect_broker.engine.resolution import (
    AWAITING_OPERATOR,
    CONSEQUENCES,
    DEPRECATED_ALIASES,
    Resolution,
    ResolutionRequest,
    permitted,
    read_operator_receipt,
    resolution_named,
)
from effect_broker.engine.results import (
    Answered,
    Busy,
    Conflict,
    NotSent,
    Outcome,
    Replayed,
    Unknowable,
    Unknown,
)
from effect_broker.engine.sealed import open_receipt, open_request
from effect_broker.engine.slots import UpstreamSlots
from effect_broker.engine.stream import STREAMED_HEADER, Sink, StreamEnd
from effect_broker.engine.targets import base_url, upstream_url, well_known_origin
from effect_broker.engine.upstream import (
    NEVER_CONNECTED,
    TLS_REFUSED,
    client_session,
    one_try,
    tls_failure,
    upstream_tls,
)
from effect_broker.engine.waiters import Waiters
from effect_broker.engine.wiring import Wiring

__all__ = [
    "AWAITING_OPERATOR",
    "COMPLETE",
    "CONSEQUENCES",
    "DEPRECATED_ALIASES",
    "NEVER_CONNECTED",
    "STREAMED_HEADER",
    "TLS_REFUSED",
    "AnswerWatch",
    "Answered",
    "Busy",
    "Conflict",
    "Engine",
    "Finding",
    "Intent",
    "Kit",
    "KitAnswer",
    "LedgerReader",
    "NotSent",
    "Outcome",
    "ProbeResult",
    "ProbeVerdict",
    "Replayed",
    "Resolution",
    "ResolutionRequest",
    "RotationReport",
    "Sink",
    "StoredRequest",
    "StoredResponse",
    "StreamEnd",
    "Unknowable",
    "Unknown",
    "UpstreamSlots",
    "Waiters",
    "Wiring",
    "base_url",
    "client_session",
    "one_try",
    "open_receipt",
    "open_request",
    "permitted",
    "read_operator_receipt",
    "refused_for_good",
    "resolution_named",
    "rotate",
    "run_probe",
    "status_after_answer",
    "tls_failure",
    "upstream_tls",
    "upstream_url",
    "well_known_origin",
    "with_idempotency_root",
    "worker_name",
]
