"""The agent demo: a model chooses the tool, the proxy makes its retry safe.

``effect-broker demo agent`` starts the demo payment target, a ledger and the real
proxy process, then lets a model (scripted, OpenAI, or Grok through its
OpenAI-compatible endpoint) handle one request: "charge order-42 42.00 USD". The model
picks the only tool, ``charge_order``; it never picks the safety class (the route's
contract does) nor the retry policy (the tool does, with one operation key per intent
from ``effect_broker.client``). With ``--kill-after-commit`` the proxy dies right after
the target committed the charge and before its answer is passed on; it is restarted, the
tool retries with the same key and gets the charge's answer back, and the target's own
table shows one charge.

Split by job: ``models`` (the chat models: scripted, and the ``openai`` SDK), ``tool``
(the charge through the proxy, retried), ``loop`` (the tool-calling conversation),
``stage`` (the processes and the ledger) and ``transcript`` (the plain-words record).
"""

from effect_broker.demo.agent.loop import AgentAnswer, run_conversation
from effect_broker.demo.agent.models import (
    PROVIDER_NAMES,
    PROVIDERS,
    SCRIPTED,
    ChatModel,
    ModelFailed,
    ProviderSettings,
    ProviderUnavailable,
    ScriptedModel,
    provider_model,
)
from effect_broker.demo.agent.stage import DemoResult, run_demo
from effect_broker.demo.agent.transcript import Transcript

__all__ = [
    "PROVIDERS",
    "PROVIDER_NAMES",
    "SCRIPTED",
    "AgentAnswer",
    "ChatModel",
    "DemoResult",
    "ModelFailed",
    "ProviderSettings",
    "ProviderUnavailable",
    "ScriptedModel",
    "Transcript",
    "provider_model",
    "run_conversation",
    "run_demo",
]
