"""One HTTPS request from a real Python client, configured only by the environment.

Run as ``python py_client.py CLIENT URL HEADERS_JSON`` with the body on stdin; prints
``{"status", "headers", "body_b64"}``. The proxy comes from ``HTTPS_PROXY`` and the
trusted CAs from ``SSL_CERT_FILE`` / ``REQUESTS_CA_BUNDLE``, as in an agent's container:
the script passes no proxy and no CA of its own.
"""

from __future__ import annotations

import asyncio
import base64
import json
import sys

Reply = tuple[int, list[tuple[str, str]], bytes]


def with_requests(url: str, headers: dict[str, str], body: bytes) -> Reply:
    import requests

    response = requests.post(url, data=body, headers=headers, timeout=10)
    return response.status_code, list(response.headers.items()), response.content


def with_httpx(url: str, headers: dict[str, str], body: bytes) -> Reply:
    import httpx

    response = httpx.post(url, content=body, headers=headers, timeout=10)
    return response.status_code, list(response.headers.items()), response.content


def with_urllib(url: str, headers: dict[str, str], body: bytes) -> Reply:
    import urllib.error
    import urllib.request

    request = urllib.request.Request(url, data=body, headers=headers, method="POST")
    try:
        with urllib.request.urlopen(request, timeout=10) as response:
            return response.status, list(response.headers.items()), response.read()
    except urllib.error.HTTPError as refused:  # a 4xx/5xx answer is still an answer
        return refused.code, list(refused.headers.items()), refused.read()


def with_aiohttp(url: str, headers: dict[str, str], body: bytes) -> Reply:
    import aiohttp

    async def send() -> Reply:
        async with (
            aiohttp.ClientSession(trust_env=True) as session,
            session.post(url, data=body, headers=headers) as response,
        ):
            return response.status, list(response.headers.items()), await response.read()

    return asyncio.run(send())


CLIENTS = {
    "requests": with_requests,
    "httpx": with_httpx,
    "aiohttp": with_aiohttp,
    "urllib": with_urllib,
}


def main() -> None:
    client, url, headers = sys.argv[1], sys.argv[2], json.loads(sys.argv[3])
    status, pairs, body = CLIENTS[client](url, headers, sys.stdin.buffer.read())
    json.dump(
        {
            "status": status,
            "headers": pairs,
            "body_b64": base64.b64encode(body).decode(),
        },
        sys.stdout,
    )


if __name__ == "__main__":
    main()
