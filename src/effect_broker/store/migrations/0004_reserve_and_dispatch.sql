-- 0004: a new effect may be reserved and started in one transaction.
-- For targets where a resend is safe (idempotent, reconcilable) the request path has no
-- reason to commit PREPARED and then DISPATCHING separately: one commit holds the
-- reservation, the attempt row and the lease, still before any byte goes upstream.
-- Unsafe targets keep the two steps, so a crash in between proves nothing was sent.

DROP FUNCTION reserve_effect(
    uuid, text, text, text, text, text, text, text, text, bytea, jsonb, text, interval
);

CREATE FUNCTION reserve_effect(
    p_effect_id uuid, p_tenant_id text, p_operation_key text, p_request_hash text,
    p_route text, p_contract_name text, p_contract_version text, p_safety text,
    p_downstream_key text, p_request_ciphertext bytea, p_request_preview jsonb,
    p_lease_owner text, p_lease interval, p_dispatch boolean,
    p_key_retention interval, p_settlement interval
) RETURNS TABLE (created boolean, effect effects, receipt effect_receipts)
LANGUAGE plpgsql AS $$
DECLARE
    v_effect effects;
    v_receipt effect_receipts;
    v_now timestamptz := now();
    v_details jsonb := jsonb_build_object(
        'route', p_route, 'contract', p_contract_name || '@' || p_contract_version);
BEGIN
    INSERT INTO effects (
        effect_id, tenant_id, operation_key, request_hash, route, contract_name,
        contract_version, safety, downstream_key, status, version, attempts,
        request_ciphertext, request_preview, lease_owner, lease_expires_at, due_at,
        first_dispatched_at, retention_deadline, settlement_deadline, created_at,
        updated_at
    ) VALUES (
        p_effect_id, p_tenant_id, p_operation_key, p_request_hash, p_route,
        p_contract_name, p_contract_version, p_safety, p_downstream_key,
        CASE WHEN p_dispatch THEN 'dispatching' ELSE 'prepared' END,
        CASE WHEN p_dispatch THEN 2 ELSE 1 END,
        CASE WHEN p_dispatch THEN 1 ELSE 0 END,
        p_request_ciphertext, p_request_preview, p_lease_owner, v_now + p_lease,
        v_now + p_lease,
        CASE WHEN p_dispatch THEN v_now END,
        CASE WHEN p_dispatch THEN v_now + p_key_retention END,
        CASE WHEN p_dispatch THEN v_now + p_settlement END,
        v_now, v_now
    )
    ON CONFLICT ON CONSTRAINT effects_tenant_operation_key DO NOTHING
    RETURNING * INTO v_effect;

    IF FOUND THEN
        PERFORM append_effect_event(
            v_effect.effect_id, 1, 'reserved', NULL, 'prepared', p_lease_owner,
            v_details, v_now);
        IF p_dispatch THEN
            INSERT INTO effect_attempts (effect_id, attempt_no, owner, started_at)
            VALUES (v_effect.effect_id, 1, p_lease_owner, v_now);
            PERFORM append_effect_event(
                v_effect.effect_id, 2, 'dispatch', 'prepared', 'dispatching',
                p_lease_owner, jsonb_build_object('attempt', 1), v_now);
        END IF;
        RETURN QUERY SELECT true, v_effect, NULL::effect_receipts;
        RETURN;
    END IF;

    SELECT * INTO v_effect FROM effects
        WHERE tenant_id = p_tenant_id AND operation_key = p_operation_key;
    SELECT * INTO v_receipt FROM effect_receipts WHERE effect_id = v_effect.effect_id;
    RETURN QUERY SELECT false, v_effect, v_receipt;
END
$$;
