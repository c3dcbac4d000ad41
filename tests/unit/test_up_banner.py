"""``up``'s banner: following it in order must not send requests for the sidecar itself
through the proxy (which refuses them: 403 egress-refused)."""

from __future__ import annotations

import re
import urllib.request
from pathlib import Path

from effect_broker.cli.up import _banner


def test_the_banner_exports_no_proxy_for_the_sidecar_itself(tmp_path: Path) -> None:
    text = _banner(None, tmp_path / "admin.token", []).format(
        proxy="http://127.0.0.1:8080", admin="http://127.0.0.1:8081"
    )
    exported = dict(
        pair.split("=", 1)
        for line in text.splitlines()
        if line.strip().startswith("export ")
        for pair in line.split()[1:]
    )

    assert exported["http_proxy"] == "http://127.0.0.1:8080"
    proxies = {"no": exported["no_proxy"]}
    for host in ("127.0.0.1:8080", "127.0.0.1:8081", "localhost:8080"):
        assert urllib.request.proxy_bypass_environment(host, proxies), host
    assert not urllib.request.proxy_bypass_environment("payments.internal", proxies)
    assert exported["NO_PROXY"] == exported["no_proxy"]
    assert re.search(r"Operator console: http://127\.0\.0\.1:8081/console", text)
