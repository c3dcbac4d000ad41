"""The one table from what the engine did (an ``Outcome``) to what a client is told.

Both adapters ask this table and only frame its entry: the HTTP proxy as an RFC 9457
problem+json answer, the MCP endpoint as a JSON-RPC error carrying the same problem in
``error.data``. Which problem, which status, whether a retry can help, how long to
wait and what to advise is decided here once; only the nouns change with the adapter
(``Words``: "Operation-Key" or "operation key", "the target" or "the MCP server").
An adapter that rendered outcomes itself would sooner or later tell a client that a
retry is safe where the other says it is not: that is why nothing else decides it.

Pure: no I/O, no aiohttp; the target's own answers (first or replayed) come back as a
``Relay`` for the adapter to frame as it must (a raw HTTP answer, or a JSON-RPC result
under the asking request's id).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import timedelta
from typing import Any

from effect_broker.engine import (
    Answered,
    Busy,
    Conflict,
    NotSent,
    Outcome,
    Replayed,
    StoredResponse,
    Unknowable,
    Unknown,
    read_operator_receipt,
)
from effect_broker.errors import (
    EffectBrokerError,
    InFlight,
    OutcomeUnknown,
    PayloadMismatch,
    ResolvedByOperator,
    SendWithheld,
    UpstreamBusy,
    UpstreamTLS,
    UpstreamUnreachable,
)
from effect_broker.models import Effect, ReceiptSource, SafetyClass

#: The attempt detail of an MCP call cut at a request the server sent the client
#: mid-call (the method follows); ``mcp.answers`` writes it, this table words it.
SERVER_REQUEST_CUT = "the MCP server sent the client a request mid-call: "


@dataclass(frozen=True, slots=True)
class Words:
    """The nouns an adapter's clients know; the sentences around them are shared."""

    call: str  # what is busy: "this {call} is in flight"
    effect: str  # what happened or not
    key: str  # the name of the operation key
    payload: str  # what a key is bound to
    other_payload: str  # "first used with {other_payload}"
    target: str  # who receives it
    retrying: str  # what a client does again
    send: str  # "you may {send} it again"
    sending: str
    issue: str  # "do not {issue} it again"
    retry: str  # "do not {retry} it under a new key"
    may_have: str  # the first words of an unknown outcome


HTTP = Words(
    call="operation",
    effect="this effect",
    key="Operation-Key",
    payload="payload",
    other_payload="a different payload",
    target="the target",
    retrying="retrying",
    send="send",
    sending="sending",
    issue="issue",
    retry="retry",
    may_have="the target may have applied this effect",
)

MCP = Words(
    call="tool call",
    effect="this tool call",
    key="operation key",
    payload="arguments",
    other_payload="different arguments",
    target="the MCP server",
    retrying="calling again",
    send="call",
    sending="calling",
    issue="call",
    retry="call",
    may_have="the MCP server may have run this tool call",
)


@dataclass(frozen=True, slots=True)
class Answer:
    """A problem answer, before framing: everything a client is told about it.

    ``error`` names the problem (its class gives the ``type`` URI and the title, its
    message the detail); ``status`` overrides the class's HTTP status; ``retry_helps``
    (None: the class's default) is what ``x-should-retry`` says; ``message`` is the
    short line SDKs show; ``close``: the connection must not be reused after it.
    """

    error: EffectBrokerError
    effect: Effect | None = None
    status: int | None = None
    retry_after: timedelta | None = None
    retry_helps: bool | None = None
    message: str | None = None
    extra: Mapping[str, Any] = field(default_factory=dict)
    headers: Mapping[str, str] = field(default_factory=dict)
    close: bool = False

    @property
    def code(self) -> int:
        """The HTTP status this answer stands for."""
        return self.status or self.error.status

    @property
    def helps(self) -> bool:
        """Whether the same request, sent again later, can succeed."""
        return self.error.retry_helps if self.retry_helps is None else self.retry_helps


@dataclass(frozen=True, slots=True)
class Relay:
    """The target's own answer, first or replayed from its receipt: the adapter frames
    it (an operator's receipt never comes back as one; see ``operator_answer``)."""

    response: StoredResponse
    effect: Effect
    replayed: bool


def answer_for(outcome: Outcome, words: Words) -> Relay | Answer:
    """What a client is told about ``outcome``, in ``words``."""
    effect = outcome.effect
    match outcome:
        case Answered(attempt=attempt):
            assert attempt.response is not None
            return Relay(attempt.response, effect, replayed=False)
        case Replayed(source=ReceiptSource.OPERATOR, response=response):
            return operator_answer(effect, response, words)
        case Replayed(response=response):
            return Relay(response, effect, replayed=True)
        case Conflict():
            return Answer(
                PayloadMismatch(
                    f"this {words.key} was first used with {words.other_payload}; use "
                    f"a new key for a new intent, or resend the original {words.payload}"
                ),
                effect,
            )
        case Busy(reason=reason, retry_after=retry_after):
            return Answer(
                InFlight(f"this {words.call} is {reason}"),
                effect,
                retry_after=retry_after,
            )
        case NotSent():
            return _not_sent(outcome, words)
        case Unknown():
            return _unknown(outcome, words)
    raise AssertionError(f"unhandled outcome {outcome!r}")


def _not_sent(outcome: NotSent, words: Words) -> Answer:
    """Nothing was sent: which of the proxy's reasons, and whether the same key helps."""
    detail, again = outcome.detail, f"{words.retrying} with the same {words.key}"
    if outcome.saturated:
        error: EffectBrokerError = UpstreamBusy(
            f"{detail}; nothing was sent, so {again} is safe"
        )
    elif outcome.withheld:
        error = SendWithheld(f"{detail}; {again} is safe")
    elif outcome.tls:
        return Answer(
            UpstreamTLS(
                f"{detail}; nothing was sent. The proxy always verifies {words.target}'s "
                "certificate (trust a private CA with EFFECT_BROKER_UPSTREAM_CA_FILE). "
                "This failure is the proxy's and does not use up the effect's retries: "
                f"once the proxy trusts {words.target}, {again} sends it"
            ),
            outcome.effect,
        )
    else:
        error = UpstreamUnreachable(
            f"could not reach {words.target} ({detail}); nothing was sent, so {again} "
            "is safe"
        )
    return Answer(error, outcome.effect, retry_after=outcome.retry_after)


def _unknown(outcome: Unknown, words: Words) -> Answer:
    effect, why = outcome.effect, outcome.why
    if outcome.detail.startswith(SERVER_REQUEST_CUT):
        return Answer(
            OutcomeUnknown(_server_request_detail(outcome, words)),
            effect,
            retry_after=outcome.retry_after,
            retry_helps=False,  # a resend would stop at the same question
        )
    if why in (Unknowable.TIMED_OUT, Unknowable.LOST):
        return Answer(
            OutcomeUnknown(
                f"{words.may_have}, but its answer was lost ({outcome.detail}). "
                f"{unknown_advice(effect.safety, words)}"
            ),
            effect,
            status=504 if why is Unknowable.TIMED_OUT else 502,
            retry_after=outcome.retry_after,
            # The same key again is safe and useful where the target deduplicates
            # or can be asked; for an unsafe target it can only be refused.
            retry_helps=effect.safety is not SafetyClass.UNSAFE,
        )
    if why is Unknowable.AWAITING_OPERATOR:
        return Answer(
            OutcomeUnknown(
                f"the outcome of {words.effect} is unknown ({outcome.detail}); it was "
                "not sent again. An operator resolves it through the admin API"
            ),
            effect,
            retry_after=outcome.retry_after,
            message=f"whether {words.effect} happened is unknown, and it will not be "
            f"sent again: do not {words.retry} it under a new key before an operator "
            f"has checked {words.target}",
        )
    return Answer(
        OutcomeUnknown(f"{outcome.detail}; it was not sent again"),
        effect,
        retry_after=outcome.retry_after,
        retry_helps=True,  # a lookup can settle it once the bound has passed
    )


def unknown_advice(safety: SafetyClass, words: Words) -> str:
    """What the same key does next for an effect whose answer was lost."""
    key = words.key
    if safety is SafetyClass.IDEMPOTENT:
        return (
            f"{words.retrying.capitalize()} with the same {key} is safe: "
            f"{words.target} deduplicates."
        )
    if safety is SafetyClass.RECONCILABLE:
        return f"A retry with the same {key} looks the effect up first."
    if safety is SafetyClass.TRANSACTIONAL:
        return (
            f"A retry with the same {key} looks the attempt up at {words.target} "
            f"first, and sends it again only once {words.target} proved it never "
            "committed."
        )
    return "It will not be sent again; an operator resolves it through the admin API."


def _server_request_detail(outcome: Unknown, words: Words) -> str:
    """Why a call cut at a server request is unknown, and what to change."""
    method = outcome.detail.removeprefix(SERVER_REQUEST_CUT)
    if outcome.effect.safety is SafetyClass.UNSAFE:
        advice = "It will not be sent again; an operator resolves it."
    else:
        advice = (
            f"{words.retrying.capitalize()} with the same {words.key} is safe, but "
            f"{words.target} will ask again."
        )
    return (
        f"{words.target} asked the client for input mid-call ({method}); effect-broker "
        "does not relay server requests on a recorded tool call, so it stopped "
        "reading there and the tool may or may not have acted before asking. "
        f"{advice} Tools that ask for input work through the proxy on the "
        "2026-07-28 revision, where the question comes back as an input_required "
        "result"
    )


def operator_answer(effect: Effect, receipt: StoredResponse, words: Words) -> Answer:
    """A retry of an effect an operator settled: never the operator's note dressed up
    as the target's answer, and a message that says plainly whether it happened."""
    verdict = read_operator_receipt(receipt)
    if verdict.happened:
        made = f" ({verdict.external_id})" if verdict.external_id else ""
        message = (
            f"{words.effect} happened{made}, as an operator confirmed: do not "
            f"{words.issue} it again, under this key or any other"
        )
    elif verdict.proven_absent:
        message = (
            f"an operator proved {words.effect} did not happen; it will not be sent "
            "under this key. If it is still wanted, you may "
            f"{words.send} it again under a new {words.key}"
        )
    else:
        message = (
            f"an operator abandoned {words.effect} without finding out whether it "
            "happened: it may have happened. It will not be sent under this key; "
            f"{words.sending} it again under a new {words.key} risks doing it twice, "
            f"so check with {words.target} first"
        )
    return Answer(
        ResolvedByOperator(f"{message}. The operator's reason: {verdict.reason}"),
        effect,
        message=message,
        extra={
            "resolution": verdict.resolution.value,
            "reason": verdict.reason,
            "evidence": dict(verdict.evidence),
            "external_id": verdict.external_id,
        },
    )
