"""The chat models that drive the demo agent: scripted, or any OpenAI-compatible API.

The loop needs one thing from a model: given the conversation and the tools, either
tool calls or a final text. ``ScriptedModel`` answers like a well-behaved model would,
with no network and no SDK; ``OpenAIChatModel`` asks a chat-completions endpoint through
the official ``openai`` SDK (the ``agent`` extra), which is imported only when that
provider is chosen, so the scripted demo runs without it.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any, Protocol

Message = dict[str, Any]


class ProviderUnavailable(RuntimeError):
    """A provider cannot be used here: no SDK installed, or no API key set."""


class ModelFailed(RuntimeError):
    """The model's API did not answer (unreachable, refused the key, an error status)."""


@dataclass(frozen=True, slots=True)
class ToolCall:
    """One call the model asked for: its id, the tool's name, its JSON arguments."""

    id: str
    name: str
    arguments: str


@dataclass(frozen=True, slots=True)
class Turn:
    """What the model said: tool calls to run, or (with none) its final text."""

    text: str | None
    tool_calls: tuple[ToolCall, ...] = ()


class ChatModel(Protocol):
    """A model the loop can talk to."""

    name: str

    async def complete(self, messages: list[Message], tools: list[Message]) -> Turn: ...

    async def close(self) -> None:
        """Let go of connections (the demo calls it once it is done)."""


@dataclass(frozen=True, slots=True)
class ProviderSettings:
    """Where a provider's OpenAI-compatible API lives and where its key is read from."""

    name: str
    base_url: str | None  # None: the SDK's default (api.openai.com)
    key_env: str
    default_model: str


PROVIDERS: dict[str, ProviderSettings] = {
    "openai": ProviderSettings("openai", None, "OPENAI_API_KEY", "gpt-4o-mini"),
    # Grok speaks the chat-completions protocol at its own base URL.
    "grok": ProviderSettings("grok", "https://api.x.ai/v1", "XAI_API_KEY", "grok-3-mini"),
}
SCRIPTED = "scripted"
PROVIDER_NAMES = (SCRIPTED, *PROVIDERS)


class ScriptedModel:
    """Asks for the charge the user wants, then reports what the tool said.

    No network, no SDK: the demo's default, and what the tests drive by default. Its
    tool call id is fixed, as a real provider's is for one call (a retry of the same
    call repeats it).
    """

    name = "scripted model"

    def __init__(self, order_id: str, amount: int, currency: str) -> None:
        self.arguments = {"order_id": order_id, "amount": amount, "currency": currency}

    async def complete(self, messages: list[Message], tools: list[Message]) -> Turn:
        last = messages[-1]
        if last.get("role") == "tool":
            return Turn(text=_summary(str(last.get("content", ""))))
        call = ToolCall("call_scripted_1", "charge_order", json.dumps(self.arguments))
        return Turn(text=None, tool_calls=(call,))

    async def close(self) -> None:
        return None


def _summary(tool_result: str) -> str:
    try:
        result = json.loads(tool_result)
    except ValueError:
        return f"The charge tool answered: {tool_result}"
    charge = result.get("charge") if isinstance(result, dict) else None
    if isinstance(result, dict) and result.get("ok") and isinstance(charge, dict):
        amount = f"{charge.get('amount')} {charge.get('currency')}"
        return (
            f"Done: order {charge.get('order_id')} is charged {amount} "
            f"(charge {charge.get('id')})."
        )
    return f"The charge did not go through: {tool_result}"


class OpenAIChatModel:
    """A chat-completions endpoint through the official ``openai`` SDK.

    The SDK's own retries are turned off: retrying the *model* is harmless, but the
    demo shows every retry it makes, and the tool's retries are the ones that matter.
    """

    def __init__(
        self,
        provider: ProviderSettings,
        api_key: str,
        model: str,
        base_url: str | None = None,
    ) -> None:
        try:
            import openai
        except ImportError as exc:
            raise ProviderUnavailable(
                f"the {provider.name} provider needs the openai SDK: "
                "pip install 'effect-broker[agent]'"
            ) from exc
        self.name = f"{provider.name} model {model}"
        self.api_error: type[Exception] = openai.APIError
        self.model = model
        # Typed loosely: the loop's plain-dict messages are what the API takes, and the
        # SDK's TypedDict overloads would only restate them.
        self.client: Any = openai.AsyncOpenAI(
            api_key=api_key, base_url=base_url or provider.base_url, max_retries=0
        )

    async def complete(self, messages: list[Message], tools: list[Message]) -> Turn:
        try:
            response = await self.client.chat.completions.create(
                model=self.model,
                messages=messages,
                tools=tools,
                tool_choice="auto",
            )
        except self.api_error as exc:
            raise ModelFailed(f"the {self.name} did not answer: {exc}") from None
        message = response.choices[0].message
        calls = tuple(
            ToolCall(call.id, call.function.name, call.function.arguments)
            for call in message.tool_calls or ()
            if call.type == "function"
        )
        return Turn(text=message.content, tool_calls=calls)

    async def close(self) -> None:
        await self.client.close()


def provider_model(
    provider: str,
    environ: dict[str, str],
    *,
    model: str | None = None,
    base_url: str | None = None,
) -> OpenAIChatModel:
    """The model of ``provider`` (openai or grok), its key from ``environ``."""
    settings = PROVIDERS[provider]
    api_key = environ.get(settings.key_env, "").strip()
    if not api_key:
        raise ProviderUnavailable(
            f"the {provider} provider reads its API key from ${settings.key_env}, "
            "which is not set"
        )
    return OpenAIChatModel(settings, api_key, model or settings.default_model, base_url)
