-- 0006: group commit. Concurrent reservations are written by one statement and one
-- commit. Every row is still its own outcome: a key already taken is a per-row result
-- (created = false with the existing effect), never an error that fails the batch.

-- Reserve many (tenant, operation_key) at once; the arrays are parallel, one element per
-- request, and the caller never puts one key twice in a batch. As in reserve_effect, the
-- INSERT and the read-back are separate statements of a function, so the read-back takes
-- a fresh snapshot and sees a row another transaction committed while the INSERT waited.
-- The events of a new effect are chained here directly: its first event has no
-- predecessor, and the second (dispatch) chains to the first, computed in the same row.
CREATE FUNCTION reserve_effects(
    p_effect_ids uuid[], p_tenant_ids text[], p_operation_keys text[],
    p_request_hashes text[], p_routes text[], p_contract_names text[],
    p_contract_versions text[], p_safeties text[], p_downstream_keys text[],
    p_request_ciphertexts bytea[], p_request_previews text[], p_lease_owners text[],
    p_leases interval[], p_dispatch boolean[], p_key_retentions interval[],
    p_settlements interval[]
) RETURNS TABLE (ord bigint, created boolean, effect effects, receipt effect_receipts)
LANGUAGE plpgsql AS $$
DECLARE
    v_now timestamptz := now();
    v_created uuid[];
BEGIN
    WITH v AS (
        SELECT * FROM unnest(
            p_effect_ids, p_tenant_ids, p_operation_keys, p_request_hashes, p_routes,
            p_contract_names, p_contract_versions, p_safeties, p_downstream_keys,
            p_request_ciphertexts, p_request_previews, p_lease_owners, p_leases,
            p_dispatch, p_key_retentions, p_settlements
        ) AS v (effect_id, tenant_id, operation_key, request_hash, route, contract_name,
                contract_version, safety, downstream_key, request_ciphertext,
                request_preview, lease_owner, lease, dispatch, key_retention, settlement)
    ), ins AS (
        INSERT INTO effects (
            effect_id, tenant_id, operation_key, request_hash, route, contract_name,
            contract_version, safety, downstream_key, status, version, attempts,
            request_ciphertext, request_preview, lease_owner, lease_expires_at, due_at,
            first_dispatched_at, retention_deadline, settlement_deadline, created_at,
            updated_at
        )
        SELECT effect_id, tenant_id, operation_key, request_hash, route, contract_name,
            contract_version, safety, downstream_key,
            CASE WHEN dispatch THEN 'dispatching' ELSE 'prepared' END,
            CASE WHEN dispatch THEN 2 ELSE 1 END,
            CASE WHEN dispatch THEN 1 ELSE 0 END,
            request_ciphertext, request_preview::jsonb, lease_owner, v_now + lease,
            v_now + lease,
            CASE WHEN dispatch THEN v_now END,
            CASE WHEN dispatch THEN v_now + key_retention END,
            CASE WHEN dispatch THEN v_now + settlement END,
            v_now, v_now
        FROM v
        ORDER BY tenant_id, operation_key  -- one lock order for every batch
        ON CONFLICT ON CONSTRAINT effects_tenant_operation_key DO NOTHING
        RETURNING effect_id, route, contract_name, contract_version, status, lease_owner
    ), first AS (
        SELECT ins.effect_id, ins.status, ins.lease_owner, d.details,
               effect_event_digest('\x'::bytea, ins.effect_id, 1, 'reserved', NULL,
                                   'prepared', ins.lease_owner, d.details, v_now) AS digest
        FROM ins, LATERAL (
            SELECT jsonb_build_object(
                'route', ins.route,
                'contract', ins.contract_name || '@' || ins.contract_version) AS details
        ) AS d
    ), events AS (
        INSERT INTO effect_events (effect_id, seq, kind, from_status, to_status, actor,
                                   details, occurred_at, prev_digest, digest)
        SELECT effect_id, 1, 'reserved', NULL, 'prepared', lease_owner, details, v_now,
               '\x'::bytea, digest
        FROM first
        UNION ALL
        SELECT effect_id, 2, 'dispatch', 'prepared', 'dispatching', lease_owner,
               '{"attempt": 1}'::jsonb, v_now, digest,
               effect_event_digest(digest, effect_id, 2, 'dispatch', 'prepared',
                                   'dispatching', lease_owner, '{"attempt": 1}'::jsonb,
                                   v_now)
        FROM first WHERE status = 'dispatching'
    ), attempts AS (
        INSERT INTO effect_attempts (effect_id, attempt_no, owner, started_at)
        SELECT effect_id, 1, lease_owner, v_now FROM ins WHERE status = 'dispatching'
    )
    SELECT coalesce(array_agg(effect_id), '{}') INTO v_created FROM ins;

    RETURN QUERY
    SELECT k.ord, e.effect_id = ANY (v_created), e, r
    FROM unnest(p_tenant_ids, p_operation_keys) WITH ORDINALITY AS k (tenant_id,
                                                                      operation_key, ord)
    JOIN effects AS e USING (tenant_id, operation_key)
    LEFT JOIN effect_receipts AS r ON r.effect_id = e.effect_id;
END
$$;
