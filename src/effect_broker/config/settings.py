"""Settings from flags or ``EFFECT_BROKER_*`` variables (docs/reference/commands.md)."""

from __future__ import annotations

from datetime import timedelta
from pathlib import Path

from pydantic import Field, SecretStr, field_validator
from pydantic_settings import BaseSettings, SettingsConfigDict

from effect_broker.config.durations import parse_duration
from effect_broker.crypto import MasterKey
from effect_broker.errors import MasterKeyError


class Settings(BaseSettings):
    """Everything a proxy process needs to start; flags override the environment."""

    model_config = SettingsConfigDict(env_prefix="EFFECT_BROKER_", frozen=True)

    routes: Path = Field(Path("routes.yaml"), description="The routes.yaml to serve.")
    database_url: str | None = Field(
        None, description="PostgreSQL DSN; unset under `up` starts an embedded server."
    )
    listen: str = Field("127.0.0.1:8080", description="Proxy address, host:port.")
    admin_listen: str = Field("127.0.0.1:8081", description="Admin API address.")
    allowed_hosts: str = Field(
        "",
        description="Further names (comma-separated; .example.com for a domain, * for "
        "any) a reverse-mode or MCP request may name in Host, beside localhost, IP "
        "addresses, the listen host and the machine's host name.",
    )
    tenant: str = Field("default", description="The tenant a sidecar serves.")
    gateway: bool = Field(
        False, description="Shared gateway: tenant from Proxy-Authorization API keys."
    )
    master_key: SecretStr | None = Field(
        None, description="Base64 of 32 random bytes; encrypts stored payloads."
    )
    master_keys: SecretStr | None = Field(
        None,
        description="Several master keys, comma-separated base64, while one is rotated "
        "out: the first encrypts, every one decrypts. Instead of master_key.",
    )
    admin_token: SecretStr | None = Field(None, description="Bearer token for admin.")
    trace_url: str | None = Field(
        None,
        description="Your trace UI's address for one trace, with {trace_id} in it "
        "(e.g. https://jaeger.internal/trace/{trace_id}): the console links each "
        "effect's trace id there.",
    )
    ca_cert: Path | None = Field(
        None,
        description="The local CA certificate (PEM): with --ca-key, CONNECT to a host "
        "that routes watch is intercepted with a leaf signed by it.",
    )
    ca_key: Path | None = Field(None, description="The local CA's private key (PEM).")
    upstream_ca_file: Path | None = Field(
        None,
        description="A PEM bundle trusted for upstream TLS besides the system store "
        "(private CAs); upstream certificates are always verified.",
    )
    data_dir: Path = Field(
        Path(".effect-broker"), description="Where `up` keeps its database and key."
    )
    max_request_bytes: int = Field(
        10 * 1024 * 1024, ge=0, description="Largest request body accepted (413 beyond)."
    )
    max_receipt_bytes: int = Field(
        10 * 1024 * 1024,
        ge=0,
        description=(
            "Largest response body kept in a receipt; beyond it, a replay gets status "
            "and headers only (docs/reference/headers.md)."
        ),
    )
    receipt_cache_bytes: int = Field(
        4 * 1024 * 1024,
        ge=0,
        description="Memory for replayed receipts answered without the database.",
    )
    max_passthrough_bytes: int = Field(
        10 * 1024 * 1024,
        ge=0,
        description="Largest Content-Length body passed through unrecorded (413 "
        "beyond); a chunked body is streamed through as it comes.",
    )
    keepalive_timeout: timedelta = Field(
        timedelta(seconds=15),
        description="How long a client connection may sit idle, or take to send a "
        "request head, before it is closed.",
    )
    header_timeout: timedelta = Field(
        timedelta(seconds=10),
        description="How long a new connection may take to send its first bytes (and a "
        "CONNECT its whole head) before it gets a 408 and is closed.",
    )
    body_timeout: timedelta = Field(
        timedelta(seconds=30),
        description="How long a request body may take to arrive in full, counted from "
        "its head; beyond it the request gets a 408, nothing is recorded or forwarded, "
        "and the connection is closed.",
    )
    max_connections: int = Field(
        1024,
        ge=1,
        description="Open client connections on the proxy port; beyond it a new one "
        "gets a 503 and is closed. Keep it well below the file limit (ulimit -n).",
    )
    worker_heartbeat_timeout: timedelta = Field(
        timedelta(seconds=10),
        description="serve --workers N: a worker whose event loop has not sent its "
        "heartbeat for this long (paused, stuck) is killed and restarted.",
    )
    drain_timeout: timedelta = Field(
        timedelta(seconds=20),
        description="On SIGTERM or SIGINT: how long requests in flight may take to "
        "finish once the ports stop accepting; an MCP route's open GET streams end at "
        "once (their clients resume them). Keep it below the orchestrator's grace "
        "period (Kubernetes: terminationGracePeriodSeconds).",
    )
    reconciler: bool = Field(
        True, description="Run the built-in reconciler inside the proxy process."
    )
    lease_grace: timedelta = Field(
        timedelta(seconds=5),
        description="How long past a contract's timeout a dispatch lease lasts before "
        "the reconciler may treat its holder as dead; a sender held up past the lease "
        "minus this grace sends nothing (503 send-withheld). Per contract: lease_grace.",
    )
    upstream_connections: int = Field(
        100,
        ge=1,
        description="Requests one route may have out at its target at once; one slow "
        "target cannot take the connections of another.",
    )
    upstream_queue_timeout: timedelta = Field(
        timedelta(seconds=5),
        description="How long a request waits for a free connection before it is "
        "answered 503 (nothing sent, retryable); not part of the contract's timeout.",
    )
    reconciler_connections: int = Field(
        10,
        ge=1,
        description="The reconciler's own budget of concurrent requests per route.",
    )
    passthrough_connections: int = Field(
        100, ge=1, description="Connections for requests no route records."
    )
    pool_min_size: int = Field(1, ge=1)
    pool_max_size: int = Field(10, ge=1)

    def master_key_list(self) -> list[MasterKey]:
        """The configured master keys, the encrypting one first; one-line errors."""
        if self.master_key is not None and self.master_keys is not None:
            raise MasterKeyError(
                "both EFFECT_BROKER_MASTER_KEY and EFFECT_BROKER_MASTER_KEYS are set; "
                "set one (MASTER_KEYS lists every key while rotating, the new one first)"
            )
        if self.master_keys is not None:
            return MasterKey.list_from_base64(self.master_keys.get_secret_value())
        return [
            MasterKey.from_base64(
                self.master_key.get_secret_value() if self.master_key else None
            )
        ]

    @field_validator(
        "lease_grace",
        "upstream_queue_timeout",
        "keepalive_timeout",
        "header_timeout",
        "body_timeout",
        "worker_heartbeat_timeout",
        "drain_timeout",
        mode="before",
    )
    @classmethod
    def _duration(cls, value: object) -> object:
        """Durations read like routes.yaml's: ``500ms``, ``5s``, ``2m``."""
        return parse_duration(value) if isinstance(value, str) else value
