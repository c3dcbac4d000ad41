"""``EffectsClient``: the admin API from Python, on the standard library alone.

The ``effect-broker effects`` commands use it, so a script and the CLI see the same API
the same way. It uses urllib without proxies: the agent's ``HTTP_PROXY`` often points at
effect-broker itself, and admin calls must not go through the proxy port. Problems come
back as ``AdminProblem`` with the API's own title and detail, for a person to read.
Answers are the JSON documents the API's OpenAPI description (``/openapi.json``) defines.
"""

from __future__ import annotations

import json
import urllib.error
import urllib.request
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any
from urllib.parse import quote, urlencode

TIMEOUT_SECONDS = 30.0


class AdminProblem(Exception):
    """The admin API refused: its problem title and detail are what to show."""

    def __init__(self, status: int, title: str, detail: str) -> None:
        super().__init__(f"{status} {title}: {detail}")
        self.status, self.title, self.detail = status, title, detail


class AdminUnreachable(Exception):
    """No answer at all from the admin URL."""


Document = dict[str, Any]


@dataclass(frozen=True, slots=True)
class EffectsClient:
    base_url: str
    token: str | None = None

    def list(
        self,
        *,
        status: Sequence[str] = (),
        route: str | None = None,
        operation_key_prefix: str | None = None,
        older_than: float | None = None,
        cursor: str | None = None,
        limit: int | None = None,
    ) -> Document:
        """One page of effects, newest first: ``{"effects": [...], "next_cursor"}``."""
        query: dict[str, Any] = {"status": list(status)} if status else {}
        for name, value in (
            ("route", route),
            ("operation_key_prefix", operation_key_prefix),
            ("older_than", older_than),
            ("cursor", cursor),
            ("limit", limit),
        ):
            if value is not None:
                query[name] = value
        page: Document = self.call("GET", "/v1/effects", query=query)
        return page

    def inspect(self, effect_id: str, *, at_sequence: int | None = None) -> Document:
        """One effect with its history (folded up to ``at_sequence`` if given)."""
        query = {"at_sequence": at_sequence} if at_sequence is not None else None
        effect: Document = self.call("GET", _path(effect_id), query=query)
        return effect

    def receipt(self, effect_id: str) -> Document:
        """The stored answer of a settled effect."""
        receipt: Document = self.call("GET", _path(effect_id) + "/receipt")
        return receipt

    def reconcile(self, effect_id: str) -> Document:
        """Ask the reconciler to look at the effect at its next pass."""
        effect: Document = self.call("POST", _path(effect_id) + "/reconcile")
        return effect

    def resolve(
        self,
        effect_id: str,
        resolution: str,
        reason: str,
        *,
        evidence: Mapping[str, Any] | None = None,
        external_id: str | None = None,
    ) -> Document:
        """Settle an unknown effect by hand: ``succeeded`` (with evidence),
        ``not_committed`` (where the contract may resend) or ``failed``."""
        body: dict[str, Any] = {"resolution": resolution, "reason": reason}
        if evidence:
            body["evidence"] = dict(evidence)
        if external_id is not None:
            body["external_id"] = external_id
        effect: Document = self.call("POST", _path(effect_id) + "/resolve", body=body)
        return effect

    def call(
        self,
        method: str,
        path: str,
        *,
        query: Mapping[str, Any] | None = None,
        body: object = None,
    ) -> Any:
        """One JSON request; problems and network failures become exceptions."""
        url = self.base_url.rstrip("/") + path
        if query:
            url += "?" + urlencode(query, doseq=True)
        headers = {"Accept": "application/json"}
        if self.token:
            headers["Authorization"] = f"Bearer {self.token}"
        data = None
        if body is not None:
            data = json.dumps(body).encode()
            headers["Content-Type"] = "application/json"
        request = urllib.request.Request(url, data=data, method=method, headers=headers)
        opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))
        try:
            with opener.open(request, timeout=TIMEOUT_SECONDS) as response:
                return json.loads(response.read())
        except urllib.error.HTTPError as exc:
            raise _problem(exc) from None
        except urllib.error.URLError as exc:
            reason = exc.reason
            if isinstance(reason, ConnectionRefusedError):
                raise AdminUnreachable(
                    f"cannot reach the admin API at {self.base_url}: connection refused. "
                    "Is effect-broker running (`effect-broker up` or `serve`)? Point "
                    "--admin-url or EFFECT_BROKER_ADMIN_URL at its admin port."
                ) from None
            raise AdminUnreachable(
                f"cannot reach the admin API at {self.base_url}: {reason}"
            ) from None
        except (TimeoutError, ConnectionError) as exc:
            raise AdminUnreachable(
                f"the admin API at {self.base_url} did not answer: {exc}"
            ) from None
        except ValueError as exc:  # a malformed URL, or a body that is not JSON
            raise AdminUnreachable(f"{self.base_url}: {exc}") from None


def _path(effect_id: str) -> str:
    return f"/v1/effects/{quote(effect_id, safe='')}"


def _problem(exc: urllib.error.HTTPError) -> AdminProblem:
    raw = exc.read()
    try:
        document = json.loads(raw)
    except ValueError:
        document = None
    if isinstance(document, dict) and "title" in document:
        return AdminProblem(
            exc.code, str(document["title"]), str(document.get("detail", ""))
        )
    return AdminProblem(exc.code, str(exc.reason), raw.decode("utf-8", "replace")[:300])
