-- 0002: API keys for gateway mode. Only a SHA-256 of each key's secret is stored; the
-- secret is shown once when the key is made.

CREATE TABLE tenant_api_keys (
    key_id      text PRIMARY KEY,
    tenant_id   text NOT NULL REFERENCES tenants (tenant_id),
    secret_hash bytea NOT NULL,
    created_at  timestamptz NOT NULL DEFAULT now(),
    revoked_at  timestamptz
);

CREATE INDEX tenant_api_keys_tenant ON tenant_api_keys (tenant_id);
