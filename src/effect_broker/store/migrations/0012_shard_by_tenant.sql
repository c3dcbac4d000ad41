-- 0012: a ledger that a distributed engine can shard by tenant (Citus distributes by
-- one column and co-locates tables by it). Every ledger table now carries tenant_id and
-- leads its keys with it: effects (tenant_id, effect_id), attempts (tenant_id, effect_id,
-- attempt_no), receipts (tenant_id, effect_id), events (tenant_id, effect_id, seq); the
-- foreign keys are on (tenant_id, effect_id), so an effect and everything it owns live
-- on one shard. Functions and triggers look rows up by tenant as well. On one PostgreSQL
-- nothing changes in behaviour: an effect id is still a fresh random UUID, now unique
-- per tenant (which is what every read has always asked for: tenant and effect id).
--
-- Existing ledgers migrate in place: tenant_id is copied from each row's effect. That
-- rewrites the attempts, receipts and events once, under this migration's lock; the
-- append-only triggers of receipts and events are set aside for that one UPDATE only.

ALTER TABLE effect_attempts ADD COLUMN tenant_id text;
ALTER TABLE effect_receipts ADD COLUMN tenant_id text;
ALTER TABLE effect_events ADD COLUMN tenant_id text;

ALTER TABLE effect_receipts DISABLE TRIGGER effect_receipts_reencryption_only;
ALTER TABLE effect_events DISABLE TRIGGER effect_events_append_only;

UPDATE effect_attempts AS a SET tenant_id = e.tenant_id
FROM effects AS e WHERE e.effect_id = a.effect_id;
UPDATE effect_receipts AS r SET tenant_id = e.tenant_id
FROM effects AS e WHERE e.effect_id = r.effect_id;
UPDATE effect_events AS ev SET tenant_id = e.tenant_id
FROM effects AS e WHERE e.effect_id = ev.effect_id;

ALTER TABLE effect_receipts ENABLE TRIGGER effect_receipts_reencryption_only;
ALTER TABLE effect_events ENABLE TRIGGER effect_events_append_only;

ALTER TABLE effect_attempts ALTER COLUMN tenant_id SET NOT NULL;
ALTER TABLE effect_receipts ALTER COLUMN tenant_id SET NOT NULL;
ALTER TABLE effect_events ALTER COLUMN tenant_id SET NOT NULL;

-- Keys: the children's foreign keys go first, then every primary key is rebuilt with
-- tenant_id in front, then the foreign keys come back on (tenant_id, effect_id).
ALTER TABLE effect_attempts DROP CONSTRAINT effect_attempts_effect_id_fkey;
ALTER TABLE effect_receipts DROP CONSTRAINT effect_receipts_effect_id_fkey;
ALTER TABLE effect_events DROP CONSTRAINT effect_events_effect_id_fkey;

ALTER TABLE effects DROP CONSTRAINT effects_pkey,
    ADD CONSTRAINT effects_pkey PRIMARY KEY (tenant_id, effect_id);
ALTER TABLE effect_attempts DROP CONSTRAINT effect_attempts_pkey,
    ADD CONSTRAINT effect_attempts_pkey PRIMARY KEY (tenant_id, effect_id, attempt_no);
ALTER TABLE effect_receipts DROP CONSTRAINT effect_receipts_pkey,
    ADD CONSTRAINT effect_receipts_pkey PRIMARY KEY (tenant_id, effect_id);
ALTER TABLE effect_events DROP CONSTRAINT effect_events_pkey,
    ADD CONSTRAINT effect_events_pkey PRIMARY KEY (tenant_id, effect_id, seq);

ALTER TABLE effect_attempts ADD CONSTRAINT effect_attempts_effect_fkey
    FOREIGN KEY (tenant_id, effect_id) REFERENCES effects (tenant_id, effect_id)
    ON DELETE CASCADE;
ALTER TABLE effect_receipts ADD CONSTRAINT effect_receipts_effect_fkey
    FOREIGN KEY (tenant_id, effect_id) REFERENCES effects (tenant_id, effect_id)
    ON DELETE CASCADE;
ALTER TABLE effect_events ADD CONSTRAINT effect_events_effect_fkey
    FOREIGN KEY (tenant_id, effect_id) REFERENCES effects (tenant_id, effect_id)
    ON DELETE CASCADE;

-- The reconciler's wake-up index stays on due_at alone: the claim takes the earliest
-- due effects of every tenant in one ordered range scan, which an index led by
-- tenant_id cannot give (it would read every due row and sort). On a sharded ledger
-- each shard keeps this index for its own rows.

-- The event chain, looked up by tenant. The digest is computed exactly as before (it
-- does not cover tenant_id), so every chain written before this migration still
-- verifies; the tenant is part of the row's key instead.
CREATE FUNCTION append_effect_event(
    p_tenant_id text, p_effect_id uuid, p_seq bigint, p_kind text, p_from text,
    p_to text, p_actor text, p_details jsonb, p_at timestamptz
) RETURNS bytea
LANGUAGE plpgsql AS $$
DECLARE
    v_prev bytea := '\x'::bytea;
    v_digest bytea;
BEGIN
    IF p_seq > 1 THEN
        SELECT digest INTO v_prev FROM effect_events
            WHERE tenant_id = p_tenant_id AND effect_id = p_effect_id
              AND seq = p_seq - 1;
        IF NOT FOUND THEN
            RAISE EXCEPTION 'effect % has no event % to chain to', p_effect_id, p_seq - 1
                USING ERRCODE = 'foreign_key_violation';
        END IF;
    END IF;
    v_digest := effect_event_digest(v_prev, p_effect_id, p_seq, p_kind, p_from, p_to,
                                    p_actor, p_details, p_at);
    INSERT INTO effect_events (tenant_id, effect_id, seq, kind, from_status, to_status,
                               actor, details, occurred_at, prev_digest, digest)
    VALUES (p_tenant_id, p_effect_id, p_seq, p_kind, p_from, p_to, p_actor, p_details,
            p_at, v_prev, v_digest);
    RETURN v_digest;
END
$$;

DROP FUNCTION append_effect_event(
    uuid, bigint, text, text, text, text, jsonb, timestamptz
);

CREATE OR REPLACE FUNCTION reserve_effect(
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
            p_tenant_id, v_effect.effect_id, 1, 'reserved', NULL, 'prepared',
            p_lease_owner, v_details, v_now);
        IF p_dispatch THEN
            INSERT INTO effect_attempts (tenant_id, effect_id, attempt_no, owner,
                                         started_at)
            VALUES (p_tenant_id, v_effect.effect_id, 1, p_lease_owner, v_now);
            PERFORM append_effect_event(
                p_tenant_id, v_effect.effect_id, 2, 'dispatch', 'prepared',
                'dispatching', p_lease_owner, jsonb_build_object('attempt', 1), v_now);
        END IF;
        RETURN QUERY SELECT true, v_effect, NULL::effect_receipts;
        RETURN;
    END IF;

    SELECT * INTO v_effect FROM effects
        WHERE tenant_id = p_tenant_id AND operation_key = p_operation_key;
    SELECT * INTO v_receipt FROM effect_receipts
        WHERE tenant_id = p_tenant_id AND effect_id = v_effect.effect_id;
    RETURN QUERY SELECT false, v_effect, v_receipt;
END
$$;

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
        RETURNING tenant_id, effect_id, route, contract_name, contract_version, status,
                  lease_owner
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
    SELECT coalesce(array_agg(effect_id), '{}') INTO v_created FROM ins;

    RETURN QUERY
    SELECT k.ord, e.effect_id = ANY (v_created), e, r
    FROM unnest(p_tenant_ids, p_operation_keys) WITH ORDINALITY AS k (tenant_id,
                                                                      operation_key, ord)
    JOIN effects AS e USING (tenant_id, operation_key)
    LEFT JOIN effect_receipts AS r
        ON r.tenant_id = e.tenant_id AND r.effect_id = e.effect_id;
END
$$;

-- Triggers look the owning effect up by its key, tenant first.
CREATE OR REPLACE FUNCTION refuse_delete_of_live_effect() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    IF TG_OP <> 'DELETE'
        OR EXISTS (SELECT 1 FROM effects
                   WHERE tenant_id = OLD.tenant_id AND effect_id = OLD.effect_id)
    THEN
        RAISE EXCEPTION '% is append-only: % refused (only a whole settled effect '
            'leaves the ledger)', TG_TABLE_NAME, TG_OP
            USING ERRCODE = 'restrict_violation';
    END IF;
    RETURN OLD;
END
$$;

CREATE OR REPLACE FUNCTION allow_receipt_reencryption() RETURNS trigger
LANGUAGE plpgsql AS $$
DECLARE
    v_old_id bytea;
    v_new_id bytea;
BEGIN
    IF length(NEW.response_ciphertext) < 2 OR get_byte(NEW.response_ciphertext, 0) <> 1
        OR length(NEW.response_ciphertext) < 2 + get_byte(NEW.response_ciphertext, 1)
    THEN
        RAISE EXCEPTION 'effect_receipts is append-only: UPDATE to a malformed '
            'ciphertext refused' USING ERRCODE = 'restrict_violation';
    END IF;
    v_old_id := substring(OLD.response_ciphertext FROM 3
                          FOR get_byte(OLD.response_ciphertext, 1));
    v_new_id := substring(NEW.response_ciphertext FROM 3
                          FOR get_byte(NEW.response_ciphertext, 1));
    IF NEW.tenant_id IS DISTINCT FROM OLD.tenant_id
        OR NEW.effect_id IS DISTINCT FROM OLD.effect_id
        OR NEW.status_code IS DISTINCT FROM OLD.status_code
        OR NEW.source IS DISTINCT FROM OLD.source
        OR NEW.external_id IS DISTINCT FROM OLD.external_id
        OR NEW.recorded_at IS DISTINCT FROM OLD.recorded_at
        OR v_new_id = v_old_id
        OR length(NEW.response_ciphertext) - length(v_new_id)
           <> length(OLD.response_ciphertext) - length(v_old_id)
        OR NOT EXISTS (
            SELECT 1 FROM master_keys WHERE key_id = convert_from(v_new_id, 'UTF8')
        )
    THEN
        RAISE EXCEPTION 'effect_receipts is append-only: UPDATE refused (only a '
            're-encryption under another known master key may change a receipt)'
            USING ERRCODE = 'restrict_violation';
    END IF;
    RETURN NEW;
END
$$;
