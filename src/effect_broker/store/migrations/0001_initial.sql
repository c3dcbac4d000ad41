-- 0001: the ledger. Effects, their attempts, immutable receipts, a hash-chained history.

CREATE TABLE tenants (
    tenant_id   text PRIMARY KEY CHECK (length(tenant_id) BETWEEN 1 AND 128),
    created_at  timestamptz NOT NULL DEFAULT now()
);

-- Which master keys have encrypted payloads here, so a wrong key is refused at start-up
-- instead of surfacing as undecryptable receipts later.
CREATE TABLE master_keys (
    key_id      text PRIMARY KEY,
    first_used  timestamptz NOT NULL DEFAULT now()
);

CREATE TABLE effects (
    effect_id            uuid PRIMARY KEY,
    tenant_id            text NOT NULL,
    operation_key        text NOT NULL CHECK (length(operation_key) BETWEEN 1 AND 255),
    request_hash         text NOT NULL,
    route                text NOT NULL,
    contract_name        text NOT NULL,
    contract_version     text NOT NULL,
    safety               text NOT NULL
        CHECK (safety IN ('idempotent', 'reconcilable', 'unsafe', 'transactional')),
    downstream_key       text NOT NULL,
    status               text NOT NULL
        CHECK (status IN ('prepared', 'dispatching', 'succeeded', 'failed_final',
                          'retryable', 'outcome_unknown', 'reconciling', 'manual_review')),
    version              bigint NOT NULL DEFAULT 1 CHECK (version >= 1),
    attempts             integer NOT NULL DEFAULT 0 CHECK (attempts >= 0),
    lease_owner          text,
    lease_expires_at     timestamptz,
    -- The one wake-up time the reconciler looks at: a lease expiry while someone works
    -- on the effect, the next action time while it waits, NULL when nothing is due.
    due_at               timestamptz,
    first_dispatched_at  timestamptz,
    retention_deadline   timestamptz,
    settlement_deadline  timestamptz,
    request_ciphertext   bytea,
    request_preview      jsonb NOT NULL DEFAULT '{}'::jsonb,
    last_error           text,
    created_at           timestamptz NOT NULL DEFAULT now(),
    updated_at           timestamptz NOT NULL DEFAULT now(),
    CONSTRAINT effects_tenant_operation_key UNIQUE (tenant_id, operation_key)
);

CREATE INDEX effects_due ON effects (due_at) WHERE due_at IS NOT NULL;
CREATE INDEX effects_tenant_created ON effects (tenant_id, created_at DESC, effect_id DESC);
CREATE INDEX effects_tenant_status ON effects (tenant_id, status);

CREATE TABLE effect_attempts (
    effect_id    uuid NOT NULL REFERENCES effects (effect_id),
    attempt_no   integer NOT NULL CHECK (attempt_no >= 1),
    owner        text NOT NULL,
    started_at   timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (effect_id, attempt_no)
);

CREATE TABLE effect_receipts (
    effect_id            uuid PRIMARY KEY REFERENCES effects (effect_id),
    status_code          integer NOT NULL CHECK (status_code BETWEEN 100 AND 599),
    response_ciphertext  bytea NOT NULL,
    source               text NOT NULL CHECK (source IN ('response', 'probe', 'operator')),
    external_id          text,
    recorded_at          timestamptz NOT NULL DEFAULT now()
);

-- Each event's seq is the effect version it produced, so the chain has no gaps and a
-- fenced (stale) write can never add an event. digest = sha256(prev_digest || fields).
CREATE TABLE effect_events (
    effect_id    uuid NOT NULL REFERENCES effects (effect_id),
    seq          bigint NOT NULL CHECK (seq >= 1),
    kind         text NOT NULL,
    from_status  text,
    to_status    text NOT NULL,
    actor        text NOT NULL,
    details      jsonb NOT NULL DEFAULT '{}'::jsonb,
    occurred_at  timestamptz NOT NULL DEFAULT now(),
    prev_digest  bytea NOT NULL,
    digest       bytea NOT NULL,
    PRIMARY KEY (effect_id, seq)
);

CREATE FUNCTION effect_event_digest(
    prev_digest bytea, effect_id uuid, seq bigint, kind text, from_status text,
    to_status text, actor text, details jsonb, occurred_at timestamptz
) RETURNS bytea
LANGUAGE sql IMMUTABLE AS $$
    SELECT sha256(prev_digest || convert_to(concat_ws(
        chr(31), effect_id::text, seq::text, kind, coalesce(from_status, ''), to_status,
        actor, details::text,
        (extract(epoch FROM occurred_at) * 1000000)::bigint::text
    ), 'UTF8'))
$$;

-- Append the event for an effect's new version, chained to the one before it. Every write
-- that bumps effects.version calls this exactly once; a missing predecessor is an error,
-- never a silent fresh chain.
CREATE FUNCTION append_effect_event(
    p_effect_id uuid, p_seq bigint, p_kind text, p_from text, p_to text, p_actor text,
    p_details jsonb, p_at timestamptz
) RETURNS bytea
LANGUAGE plpgsql AS $$
DECLARE
    v_prev bytea := '\x'::bytea;
    v_digest bytea;
BEGIN
    IF p_seq > 1 THEN
        SELECT digest INTO v_prev FROM effect_events
            WHERE effect_id = p_effect_id AND seq = p_seq - 1;
        IF NOT FOUND THEN
            RAISE EXCEPTION 'effect % has no event % to chain to', p_effect_id, p_seq - 1
                USING ERRCODE = 'foreign_key_violation';
        END IF;
    END IF;
    v_digest := effect_event_digest(v_prev, p_effect_id, p_seq, p_kind, p_from, p_to,
                                    p_actor, p_details, p_at);
    INSERT INTO effect_events (effect_id, seq, kind, from_status, to_status, actor,
                               details, occurred_at, prev_digest, digest)
    VALUES (p_effect_id, p_seq, p_kind, p_from, p_to, p_actor, p_details, p_at, v_prev,
            v_digest);
    RETURN v_digest;
END
$$;

CREATE FUNCTION refuse_mutation() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    RAISE EXCEPTION '% is append-only: % refused', TG_TABLE_NAME, TG_OP
        USING ERRCODE = 'restrict_violation';
END
$$;

CREATE TRIGGER effect_receipts_immutable
    BEFORE UPDATE OR DELETE ON effect_receipts
    FOR EACH ROW EXECUTE FUNCTION refuse_mutation();
CREATE TRIGGER effect_receipts_no_truncate
    BEFORE TRUNCATE ON effect_receipts
    FOR EACH STATEMENT EXECUTE FUNCTION refuse_mutation();
CREATE TRIGGER effect_events_append_only
    BEFORE UPDATE OR DELETE ON effect_events
    FOR EACH ROW EXECUTE FUNCTION refuse_mutation();
CREATE TRIGGER effect_events_no_truncate
    BEFORE TRUNCATE ON effect_events
    FOR EACH STATEMENT EXECUTE FUNCTION refuse_mutation();

-- Reserve (tenant, operation_key) in one round trip. A plain INSERT ... ON CONFLICT DO
-- NOTHING followed by a SELECT in the same statement cannot see a row that a concurrent
-- transaction committed after the statement began; in a function each statement takes a
-- fresh snapshot, so the loser of a race always reads the winner's row. The replay path
-- writes nothing.
CREATE FUNCTION reserve_effect(
    p_effect_id uuid, p_tenant_id text, p_operation_key text, p_request_hash text,
    p_route text, p_contract_name text, p_contract_version text, p_safety text,
    p_downstream_key text, p_request_ciphertext bytea, p_request_preview jsonb,
    p_lease_owner text, p_lease interval
) RETURNS TABLE (created boolean, effect effects, receipt effect_receipts)
LANGUAGE plpgsql AS $$
DECLARE
    v_effect effects;
    v_receipt effect_receipts;
    v_now timestamptz := now();
BEGIN
    INSERT INTO effects (
        effect_id, tenant_id, operation_key, request_hash, route, contract_name,
        contract_version, safety, downstream_key, status, request_ciphertext,
        request_preview, lease_owner, lease_expires_at, due_at, created_at, updated_at
    ) VALUES (
        p_effect_id, p_tenant_id, p_operation_key, p_request_hash, p_route,
        p_contract_name, p_contract_version, p_safety, p_downstream_key, 'prepared',
        p_request_ciphertext, p_request_preview, p_lease_owner, v_now + p_lease,
        v_now + p_lease, v_now, v_now
    )
    ON CONFLICT ON CONSTRAINT effects_tenant_operation_key DO NOTHING
    RETURNING * INTO v_effect;

    IF FOUND THEN
        PERFORM append_effect_event(
            v_effect.effect_id, 1, 'reserved', NULL, 'prepared', p_lease_owner,
            jsonb_build_object('route', p_route,
                               'contract', p_contract_name || '@' || p_contract_version),
            v_now);
        RETURN QUERY SELECT true, v_effect, NULL::effect_receipts;
        RETURN;
    END IF;

    SELECT * INTO v_effect FROM effects
        WHERE tenant_id = p_tenant_id AND operation_key = p_operation_key;
    SELECT * INTO v_receipt FROM effect_receipts WHERE effect_id = v_effect.effect_id;
    RETURN QUERY SELECT false, v_effect, v_receipt;
END
$$;
