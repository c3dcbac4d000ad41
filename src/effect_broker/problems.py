"""RFC 9457 problem details: every error the proxy itself makes, in one shape.

The ``type`` is stable per cause so clients can branch on it; ``detail`` is written for
the person reading the log. No stack trace ever reaches a client.
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping
from datetime import timedelta
from typing import Any

from aiohttp import web

from effect_broker.errors import EffectBrokerError
from effect_broker.models import Effect

PROBLEM_JSON = "application/problem+json"


def effect_headers(effect: Effect) -> dict[str, str]:
    return {"Effect-Id": str(effect.effect_id), "Effect-Status": str(effect.status)}


def problem_response(
    error: EffectBrokerError,
    *,
    status: int | None = None,
    effect: Effect | None = None,
    retry_after: timedelta | None = None,
    extra: Mapping[str, Any] | None = None,
    headers: Mapping[str, str] | None = None,
) -> web.Response:
    code = status or error.status
    body: dict[str, Any] = {
        "type": error.type_uri,
        "title": (type(error).__doc__ or "").strip().split("\n")[0],
        "status": code,
        "detail": error.message,
    }
    out_headers: dict[str, str] = dict(headers or {})
    if effect is not None:
        body["effect_id"] = str(effect.effect_id)
        body["effect_status"] = str(effect.status)
        out_headers.update(effect_headers(effect))
    if retry_after is not None:
        seconds = max(1, math.ceil(retry_after.total_seconds()))
        out_headers["Retry-After"] = str(seconds)
        body["retry_after_seconds"] = seconds
    body.update(extra or {})
    return web.Response(
        status=code,
        body=json.dumps(body).encode(),
        content_type=PROBLEM_JSON,
        headers=out_headers,
    )
