-- 0011: the duplicate-payload guard. A contract with duplicate_payload_window asks, for
-- each new operation key, whether a recent effect on the same route had the same
-- canonical request (a client minting a fresh key per retry). This index answers that
-- from the newest matching rows without scanning the tenant's effects.
CREATE INDEX effects_duplicate_payload
    ON effects (tenant_id, route, request_hash, created_at DESC);
