-- 0014: the one-row writes after reserve, and group commit's shares of one tenant, as
-- functions taking the tenant, so a ledger sharded by tenant can run each of them
-- whole on the tenant's shard.
--
-- On Citus a statement that inserts rows returned by another step of itself (the
-- writes' UPDATE ... RETURNING, then INSERT INTO the events, attempts or receipts
-- from it) runs as several steps and copies the intermediate rows to every worker,
-- so each such write commits with two-phase commit across all workers. A function
-- distributed by its tenant argument (store/distribute.py distributes every function
-- with p_tenant_id, co-located with effects) runs on the tenant's worker alone, as
-- reserve_effect does. Each function does exactly what its block in queries.sql does:
-- the same compare-and-swap on version and status, the same columns and times, and
-- the same event with the same digest, chained through append_effect_event (which a
-- function may call where a statement on Citus may not; a missing predecessor is
-- refused there, as the statements' NOT NULL digest refuses it).
-- Times are computed into variables first: Citus refuses a COALESCE over a
-- non-immutable expression (timestamptz + interval) in a distributed UPDATE. A fenced
-- write returns no row. One PostgreSQL keeps running the statements; the
-- store calls these only on a distributed ledger (store/sharding.py).

CREATE FUNCTION start_attempt_effect(
    p_tenant_id text, p_effect_id uuid, p_version bigint, p_owner text,
    p_lease interval, p_key_retention interval, p_settlement interval, p_from text
) RETURNS SETOF effects
LANGUAGE plpgsql AS $$
DECLARE
    v_now timestamptz := now();
    v_retention_end timestamptz := v_now + p_key_retention;
    v_effect effects;
BEGIN
    UPDATE effects AS e SET
        status = 'dispatching',
        version = e.version + 1,
        attempts = e.attempts + 1,
        lease_owner = p_owner,
        lease_expires_at = v_now + p_lease,
        due_at = v_now + p_lease,
        first_dispatched_at = coalesce(e.first_dispatched_at, v_now),
        retention_deadline = coalesce(e.retention_deadline, v_retention_end),
        settlement_deadline = v_now + p_settlement,
        last_error = NULL,
        updated_at = v_now
    WHERE e.tenant_id = p_tenant_id AND e.effect_id = p_effect_id
      AND e.version = p_version AND e.status = p_from
    RETURNING e.* INTO v_effect;
    IF NOT FOUND THEN
        RETURN;
    END IF;
    INSERT INTO effect_attempts (tenant_id, effect_id, attempt_no, owner, started_at)
    VALUES (p_tenant_id, p_effect_id, v_effect.attempts, p_owner, v_effect.updated_at);
    PERFORM append_effect_event(
        p_tenant_id, p_effect_id, v_effect.version, 'dispatch', p_from, 'dispatching',
        p_owner, jsonb_build_object('attempt', v_effect.attempts), v_effect.updated_at);
    RETURN NEXT v_effect;
END
$$;

CREATE FUNCTION record_receipt_effect(
    p_tenant_id text, p_effect_id uuid, p_version bigint, p_from text, p_to text,
    p_kind text, p_actor text, p_status_code integer, p_response bytea,
    p_source text, p_external_id text, p_details jsonb
) RETURNS SETOF effects
LANGUAGE plpgsql AS $$
DECLARE
    v_now timestamptz := now();
    v_effect effects;
BEGIN
    UPDATE effects AS e SET
        status = p_to,
        version = e.version + 1,
        lease_owner = NULL,
        lease_expires_at = NULL,
        due_at = NULL,
        last_error = NULL,
        updated_at = v_now
    WHERE e.tenant_id = p_tenant_id AND e.effect_id = p_effect_id
      AND e.version = p_version AND e.status = p_from
    RETURNING e.* INTO v_effect;
    IF NOT FOUND THEN
        RETURN;
    END IF;
    INSERT INTO effect_receipts (tenant_id, effect_id, status_code, response_ciphertext,
                                 source, external_id, recorded_at)
    VALUES (p_tenant_id, p_effect_id, p_status_code, p_response, p_source,
            p_external_id, v_effect.updated_at);
    PERFORM append_effect_event(
        p_tenant_id, p_effect_id, v_effect.version, p_kind, p_from, p_to, p_actor,
        jsonb_build_object('status_code', p_status_code, 'source', p_source,
                           'external_id', p_external_id) || p_details,
        v_effect.updated_at);
    RETURN NEXT v_effect;
END
$$;

CREATE FUNCTION transition_effect(
    p_tenant_id text, p_effect_id uuid, p_version bigint, p_from text, p_to text,
    p_kind text, p_actor text, p_lease_owner text, p_lease interval,
    p_due_in interval, p_error text, p_details jsonb, p_settle_within interval
) RETURNS SETOF effects
LANGUAGE plpgsql AS $$
DECLARE
    v_now timestamptz := now();
    v_lease_end timestamptz := v_now + p_lease;
    v_due timestamptz := coalesce(v_now + p_lease, v_now + p_due_in);
    v_settle_end timestamptz := v_now + p_settle_within;
    v_effect effects;
BEGIN
    UPDATE effects AS e SET
        status = p_to,
        version = e.version + 1,
        lease_owner = p_lease_owner,
        lease_expires_at = v_lease_end,
        due_at = v_due,
        settlement_deadline = coalesce(v_settle_end, e.settlement_deadline),
        last_error = p_error,
        updated_at = v_now
    WHERE e.tenant_id = p_tenant_id AND e.effect_id = p_effect_id
      AND e.version = p_version AND e.status = p_from
    RETURNING e.* INTO v_effect;
    IF NOT FOUND THEN
        RETURN;
    END IF;
    PERFORM append_effect_event(
        p_tenant_id, p_effect_id, v_effect.version, p_kind, p_from, p_to, p_actor,
        p_details, v_effect.updated_at);
    RETURN NEXT v_effect;
END
$$;

CREATE FUNCTION reschedule_effect(
    p_tenant_id text, p_effect_id uuid, p_version bigint, p_status text,
    p_delay interval, p_actor text, p_error text
) RETURNS SETOF effects
LANGUAGE plpgsql AS $$
DECLARE
    v_now timestamptz := now();
    v_effect effects;
    v_details jsonb := jsonb_build_object('delay_seconds', extract(epoch FROM p_delay));
BEGIN
    UPDATE effects AS e SET
        version = e.version + 1,
        lease_owner = NULL,
        lease_expires_at = NULL,
        due_at = v_now + p_delay,  -- NULL: nothing is due until an operator acts
        last_error = coalesce(p_error, e.last_error),
        updated_at = v_now
    WHERE e.tenant_id = p_tenant_id AND e.effect_id = p_effect_id
      AND e.version = p_version AND e.status = p_status
    RETURNING e.* INTO v_effect;
    IF NOT FOUND THEN
        RETURN;
    END IF;
    PERFORM append_effect_event(
        p_tenant_id, p_effect_id, v_effect.version, 'rescheduled', p_status, p_status,
        p_actor, v_details, v_effect.updated_at);
    RETURN NEXT v_effect;
END
$$;

CREATE FUNCTION renew_lease_effect(
    p_tenant_id text, p_effect_id uuid, p_version bigint, p_owner text,
    p_lease interval
) RETURNS SETOF effects
LANGUAGE plpgsql AS $$
DECLARE
    v_now timestamptz := now();
    v_effect effects;
    v_details jsonb := jsonb_build_object('lease_seconds', extract(epoch FROM p_lease));
BEGIN
    UPDATE effects AS e SET
        version = e.version + 1,
        lease_expires_at = v_now + p_lease,
        due_at = v_now + p_lease,
        updated_at = v_now
    WHERE e.tenant_id = p_tenant_id AND e.effect_id = p_effect_id
      AND e.version = p_version AND e.status = 'dispatching'
      AND e.lease_owner = p_owner
    RETURNING e.* INTO v_effect;
    IF NOT FOUND THEN
        RETURN;
    END IF;
    PERFORM append_effect_event(
        p_tenant_id, p_effect_id, v_effect.version, 'lease_renewed', 'dispatching',
        'dispatching', p_owner, v_details, v_effect.updated_at);
    RETURN NEXT v_effect;
END
$$;

-- The request path's batches within one tenant (group commit on a sharded ledger):
-- each request of the tenant's share through the one-row function above, in the order
-- of the batch, in one transaction; a fenced request has no row. The rows of other
-- tenants are left out, as the batch statements within one tenant leave them out.
CREATE FUNCTION start_attempts_of_tenant(
    p_tenant_id text, p_effect_ids uuid[], p_versions bigint[], p_owners text[],
    p_leases interval[], p_key_retentions interval[], p_settlements interval[],
    p_from text[], p_tenant_ids text[]
) RETURNS TABLE (batch_ord bigint, effect effects)
LANGUAGE plpgsql AS $$
DECLARE
    v record;
    v_effect effects;
BEGIN
    FOR v IN
        SELECT * FROM unnest(p_effect_ids, p_versions, p_owners, p_leases,
                             p_key_retentions, p_settlements, p_from, p_tenant_ids)
            WITH ORDINALITY AS u (effect_id, version, owner, lease, key_retention,
                                  settlement, from_status, tenant_id, ord)
        WHERE u.tenant_id = p_tenant_id
        ORDER BY u.ord
    LOOP
        SELECT * INTO v_effect FROM start_attempt_effect(
            p_tenant_id, v.effect_id, v.version, v.owner, v.lease, v.key_retention,
            v.settlement, v.from_status);
        IF FOUND THEN
            batch_ord := v.ord;
            effect := v_effect;
            RETURN NEXT;
        END IF;
    END LOOP;
END
$$;

CREATE FUNCTION record_receipts_of_tenant(
    p_tenant_id text, p_effect_ids uuid[], p_versions bigint[], p_from text[],
    p_to text[], p_kinds text[], p_actors text[], p_status_codes integer[],
    p_responses bytea[], p_sources text[], p_external_ids text[], p_details text[],
    p_tenant_ids text[]
) RETURNS TABLE (batch_ord bigint, effect effects)
LANGUAGE plpgsql AS $$
DECLARE
    v record;
    v_effect effects;
BEGIN
    FOR v IN
        SELECT * FROM unnest(p_effect_ids, p_versions, p_from, p_to, p_kinds, p_actors,
                             p_status_codes, p_responses, p_sources, p_external_ids,
                             p_details, p_tenant_ids)
            WITH ORDINALITY AS u (effect_id, version, from_status, to_status, kind,
                                  actor, status_code, ciphertext, source, external_id,
                                  details, tenant_id, ord)
        WHERE u.tenant_id = p_tenant_id
        ORDER BY u.ord
    LOOP
        SELECT * INTO v_effect FROM record_receipt_effect(
            p_tenant_id, v.effect_id, v.version, v.from_status, v.to_status, v.kind,
            v.actor, v.status_code, v.ciphertext, v.source, v.external_id,
            v.details::jsonb);
        IF FOUND THEN
            batch_ord := v.ord;
            effect := v_effect;
            RETURN NEXT;
        END IF;
    END LOOP;
END
$$;

-- The reconciler's claim within one tenant, as claim_due_of_tenant did it: the
-- tenant's earliest due effects, locked and skipped as before, each updated by its key
-- and its event chained to its predecessor.
CREATE FUNCTION claim_due_effects_of_tenant(
    p_tenant_id text, p_limit integer, p_owner text, p_lease interval
) RETURNS TABLE (effect effects, previous_owner text)
LANGUAGE plpgsql AS $$
DECLARE
    v_due record;
    v_now timestamptz := now();
    v_effect effects;
BEGIN
    FOR v_due IN
        SELECT e.effect_id, e.lease_owner FROM effects AS e
        WHERE e.tenant_id = p_tenant_id AND e.due_at <= v_now
        ORDER BY e.due_at
        LIMIT p_limit
        FOR UPDATE SKIP LOCKED
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

-- Group commit's share of reservations within one tenant: each request through
-- reserve_effect, in the order of the keys (one lock order for every batch, as the
-- batch statements take), one row back per request: created, or the key's effect and
-- receipt as they are, a key created concurrently included.
CREATE FUNCTION reserve_effects_of_tenant(
    p_tenant_id text, p_effect_ids uuid[], p_tenant_ids text[], p_operation_keys text[],
    p_request_hashes text[], p_routes text[], p_contract_names text[],
    p_contract_versions text[], p_safeties text[], p_downstream_keys text[],
    p_request_ciphertexts bytea[], p_request_previews text[], p_lease_owners text[],
    p_leases interval[], p_dispatch boolean[], p_key_retentions interval[],
    p_settlements interval[]
) RETURNS TABLE (ord bigint, created boolean, effect effects, receipt effect_receipts)
LANGUAGE plpgsql AS $$
DECLARE
    v record;
BEGIN
    FOR v IN
        SELECT * FROM unnest(
            p_effect_ids, p_tenant_ids, p_operation_keys, p_request_hashes, p_routes,
            p_contract_names, p_contract_versions, p_safeties, p_downstream_keys,
            p_request_ciphertexts, p_request_previews, p_lease_owners, p_leases,
            p_dispatch, p_key_retentions, p_settlements
        ) WITH ORDINALITY AS u (effect_id, tenant_id, operation_key, request_hash, route,
                                contract_name, contract_version, safety, downstream_key,
                                request_ciphertext, request_preview, lease_owner, lease,
                                dispatch, key_retention, settlement, ord)
        WHERE u.tenant_id = p_tenant_id
        ORDER BY u.operation_key
    LOOP
        RETURN QUERY
        SELECT v.ord, r.created, r.effect, r.receipt
        FROM reserve_effect(
            v.effect_id, p_tenant_id, v.operation_key, v.request_hash, v.route,
            v.contract_name, v.contract_version, v.safety, v.downstream_key,
            v.request_ciphertext, v.request_preview::jsonb, v.lease_owner, v.lease,
            v.dispatch, v.key_retention, v.settlement) AS r;
    END LOOP;
END
$$;
