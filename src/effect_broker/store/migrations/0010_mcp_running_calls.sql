-- 0010: the recorded MCP tool calls running right now, shared by every worker on this
-- ledger. A client's notifications/cancelled may reach another worker than the one
-- running the call (serve --workers, or replicas behind one address); that worker must
-- still know the call is recorded, or it forwards the cancellation and the server
-- stops the tool halfway. A row lives while its call runs and is deleted when the call
-- settles; a row whose worker died stops counting at expires_at and is pruned later.

CREATE TABLE mcp_running_calls (
    running_id  uuid PRIMARY KEY,
    -- sha256 of the call's tenant, route, session and id (as the SDKs compare ids)
    call_key    bytea NOT NULL CHECK (length(call_key) = 32),
    expires_at  timestamptz NOT NULL
);

CREATE INDEX mcp_running_calls_key ON mcp_running_calls (call_key);
CREATE INDEX mcp_running_calls_expiry ON mcp_running_calls (expires_at);
