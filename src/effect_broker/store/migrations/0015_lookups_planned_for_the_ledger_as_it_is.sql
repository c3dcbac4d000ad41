-- 0015: the two function statements that walked a whole tenant once the ledger grew.
--
-- plpgsql keeps the plan of each statement for the whole session, and after a few runs
-- that is a generic plan, made for the ledger as it was then. Made on a brand-new,
-- empty ledger that has never been analyzed (autovacuum off), the planner sees every
-- index of effects led by tenant_id as equally cheap for one row, and it took the
-- primary key: a lookup by (tenant_id, operation_key) then read every effect of the
-- tenant and filtered on the key. Group commit's reserve_effects ran such a lookup for
-- every request of every batch; a new ledger driven at c=64 fell from ~2,000 to ~300
-- new effects a second within a minute, with nothing in the database to say why.
--
-- reserve_effects now answers a created row from its INSERT ... RETURNING (no lookup
-- at all, the common case), and looks up only the keys that were taken, with a
-- statement planned at each run (EXECUTE) for the ledger as it is by then. The claim
-- within one tenant (a sharded ledger's reconciler) is planned at each run the same
-- way. Each still does exactly what it did: the same rows, events, digests and order.

CREATE OR REPLACE FUNCTION reserve_effects(
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
    v_created effects[];
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
        RETURNING *
    ), first AS (
        SELECT ins.tenant_id, ins.effect_id, ins.status, ins.lease_owner, d.details,
               effect_event_digest('\x'::bytea, ins.effect_id, 1, 'reserved', NULL,
                                   'prepared', ins.lease_owner, d.details, v_now) AS digest
        FROM ins, LATERAL (
            SELECT jsonb_build_object(
                'route', ins.route,
                'contract', ins.contract_name || '@' || ins.contract_version) AS details
        ) AS d
    ), events AS (
        INSERT INTO effect_events (tenant_id, effect_id, seq, kind, from_status,
                                   to_status, actor, details, occurred_at, prev_digest,
                                   digest)
        SELECT tenant_id, effect_id, 1, 'reserved', NULL, 'prepared', lease_owner,
               details, v_now, '\x'::bytea, digest
        FROM first
        UNION ALL
        SELECT tenant_id, effect_id, 2, 'dispatch', 'prepared', 'dispatching',
               lease_owner, '{"attempt": 1}'::jsonb, v_now, digest,
               effect_event_digest(digest, effect_id, 2, 'dispatch', 'prepared',
                                   'dispatching', lease_owner, '{"attempt": 1}'::jsonb,
                                   v_now)
        FROM first WHERE status = 'dispatching'
    ), attempts AS (
        INSERT INTO effect_attempts (tenant_id, effect_id, attempt_no, owner, started_at)
        SELECT tenant_id, effect_id, 1, lease_owner, v_now
        FROM ins WHERE status = 'dispatching'
    )
    SELECT coalesce(array_agg(ins::effects), '{}') INTO v_created FROM ins;

    -- The created rows, as the INSERT returned them, matched to their requests by the
    -- effect id each request proposed.
    RETURN QUERY
    SELECT k.ord, true, c, NULL::effect_receipts
    FROM unnest(p_effect_ids) WITH ORDINALITY AS k (effect_id, ord)
    JOIN unnest(v_created) AS c ON c.effect_id = k.effect_id;

    IF cardinality(v_created) = cardinality(p_effect_ids) THEN
        RETURN;
    END IF;
    -- The keys already taken: each key's effect and receipt as they are now (a key
    -- created concurrently included), planned for the ledger as it is now.
    RETURN QUERY EXECUTE
        'SELECT k.ord, false, e, r
         FROM unnest($1, $2, $3) WITH ORDINALITY AS k (tenant_id, operation_key,
                                                       effect_id, ord)
         JOIN effects AS e
             ON e.tenant_id = k.tenant_id AND e.operation_key = k.operation_key
         LEFT JOIN effect_receipts AS r
             ON r.tenant_id = e.tenant_id AND r.effect_id = e.effect_id
         WHERE k.effect_id <> ALL ($4)'
    USING p_tenant_ids, p_operation_keys, p_effect_ids,
          ARRAY(SELECT c.effect_id FROM unnest(v_created) AS c);
END
$$;

CREATE OR REPLACE FUNCTION claim_due_effects_of_tenant(
    p_tenant_id text, p_limit integer, p_owner text, p_lease interval
) RETURNS TABLE (effect effects, previous_owner text)
LANGUAGE plpgsql AS $$
DECLARE
    v_due record;
    v_now timestamptz := now();
    v_effect effects;
BEGIN
    FOR v_due IN EXECUTE
        'SELECT e.effect_id, e.lease_owner FROM effects AS e
         WHERE e.tenant_id = $1 AND e.due_at <= $2
         ORDER BY e.due_at
         LIMIT $3
         FOR UPDATE SKIP LOCKED'
    USING p_tenant_id, v_now, p_limit
    LOOP
        UPDATE effects AS e SET
            version = e.version + 1,
            lease_owner = p_owner,
            lease_expires_at = v_now + p_lease,
            due_at = v_now + p_lease,
            updated_at = v_now
        WHERE e.tenant_id = p_tenant_id AND e.effect_id = v_due.effect_id
        RETURNING e.* INTO v_effect;
        PERFORM append_effect_event(
            p_tenant_id, v_effect.effect_id, v_effect.version, 'claimed',
            v_effect.status, v_effect.status, p_owner,
            jsonb_build_object('previous_owner', v_due.lease_owner),
            v_effect.updated_at);
        effect := v_effect;
        previous_owner := v_due.lease_owner;
        RETURN NEXT;
    END LOOP;
END
$$;
