"""A small client for the admin API, on the standard library alone.

It uses urllib without proxies: the agent's ``HTTP_PROXY`` often points at effect-broker
itself, and admin calls must not go through the proxy port. Problems come back as
``AdminProblem`` with the API's own title and detail, for a person to read.
"""

from __future__ import annotations

import json
import urllib.error
import urllib.request
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlencode

TIMEOUT_SECONDS = 30.0


class AdminProblem(Exception):
    """The admin API refused: its problem title and detail are what to show."""

    def __init__(self, status: int, title: str, detail: str) -> None:
        super().__init__(f"{status} {title}: {detail}")
        self.status, self.title, self.detail = status, title, detail


class AdminUnreachable(Exception):
    """No answer at all from the admin URL."""


@dataclass(frozen=True, slots=True)
class AdminClient:
    base_url: str
    token: str | None

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
