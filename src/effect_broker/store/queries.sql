-- Every query effect-broker runs at runtime, one named block each.
-- A block starts with "-- name --" and a one-line description; parameters are $n only.
-- Each write that changes an effect bumps its version (compare-and-swap) and appends the
-- event for that version in the same statement: through append_effect_event, or by
-- inserting it chained to its predecessor directly (group commit's settle, where a
-- function call per row cost more than the rest of the statement, and the writes a
-- sharded ledger runs on a shard, where a function that writes cannot be called from
-- the statement); a missing predecessor leaves prev_digest NULL, which is refused.

-- reserve --
-- Insert the effect (started at once when $14) or return the existing one and its receipt.
SELECT created, (effect).*, receipt, now() AS observed_at
FROM reserve_effect(
    $1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11::jsonb, $12, $13, $14, $15, $16
);

-- start_attempt --
-- Move to DISPATCHING, count the attempt, take the lease and stamp deadlines.
WITH clock AS (
    -- Every time the write stamps, computed first: the UPDATE calls no function, so a
    -- distributed engine can evaluate these once and route the row's write as it is.
    SELECT now() AS at, now() + $4::interval AS lease_end,
           now() + $5::interval AS retention_end, now() + $6::interval AS settle_end
), moved AS (
    UPDATE effects AS e SET
        status = 'dispatching',
        version = e.version + 1,
        attempts = e.attempts + 1,
        lease_owner = $3,
        lease_expires_at = clock.lease_end,
        due_at = clock.lease_end,
        first_dispatched_at = coalesce(e.first_dispatched_at, clock.at),
        retention_deadline = coalesce(e.retention_deadline, clock.retention_end),
        settlement_deadline = clock.settle_end,
        last_error = NULL,
        updated_at = clock.at
    FROM clock
    WHERE e.tenant_id = $8 AND e.effect_id = $1 AND e.version = $2 AND e.status = $7
    RETURNING e.*
), attempt AS (
    INSERT INTO effect_attempts (tenant_id, effect_id, attempt_no, owner, started_at)
    SELECT tenant_id, effect_id, attempts, $3, updated_at FROM moved
)
SELECT moved.*, append_effect_event(
    moved.tenant_id, moved.effect_id, moved.version, 'dispatch', $7, 'dispatching', $3,
    jsonb_build_object('attempt', moved.attempts), moved.updated_at
) IS NOT NULL AS event_written
FROM moved;

-- start_attempt_call --
-- start_attempt as one call of its function, run whole on the tenant's shard.
SELECT e.*, true AS event_written
FROM start_attempt_effect($8, $1, $2, $3, $4, $5, $6, $7) AS e;

-- reserve_batch --
-- Many reservations in one statement and one commit; one row back per request ($n[ord]).
SELECT ord, created, (effect).*, receipt, now() AS observed_at
FROM reserve_effects(
    $1::uuid[], $2::text[], $3::text[], $4::text[], $5::text[], $6::text[], $7::text[],
    $8::text[], $9::text[], $10::bytea[], $11::text[], $12::text[], $13::interval[],
    $14::boolean[], $15::interval[], $16::interval[]
);

-- reserve_batch_of_tenant --
-- reserve_batch within tenant $17, as one call run whole on the tenant's shard.
SELECT ord, created, (effect).*, receipt, now() AS observed_at
FROM reserve_effects_of_tenant(
    $17, $1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13, $14, $15, $16
);

-- start_attempt_batch --
-- start_attempt for many effects at once; an effect fenced by its version is missing.
WITH v AS (
    -- Every time the write stamps, computed per request first (see start_attempt).
    SELECT v.*, now() AS at, now() + v.lease AS lease_end,
           now() + v.key_retention AS retention_end, now() + v.settlement AS settle_end
    FROM unnest(
        $1::uuid[], $2::bigint[], $3::text[], $4::interval[], $5::interval[],
        $6::interval[], $7::text[], $8::text[]
    ) WITH ORDINALITY AS v (effect_id, version, owner, lease, key_retention, settlement,
                            from_status, tenant_id, ord)
), moved AS (
    UPDATE effects AS e SET
        status = 'dispatching',
        version = e.version + 1,
        attempts = e.attempts + 1,
        lease_owner = v.owner,
        lease_expires_at = v.lease_end,
        due_at = v.lease_end,
        first_dispatched_at = coalesce(e.first_dispatched_at, v.at),
        retention_deadline = coalesce(e.retention_deadline, v.retention_end),
        settlement_deadline = v.settle_end,
        last_error = NULL,
        updated_at = v.at
    FROM v
    WHERE e.tenant_id = v.tenant_id AND e.effect_id = v.effect_id
      AND e.version = v.version AND e.status = v.from_status
    RETURNING e.tenant_id, e.effect_id, e.version, e.attempts, e.lease_owner,
              e.lease_expires_at, e.due_at, e.first_dispatched_at, e.retention_deadline,
              e.settlement_deadline, e.updated_at, v.ord AS batch_ord,
              v.from_status AS batch_from
), attempt AS (
    INSERT INTO effect_attempts (tenant_id, effect_id, attempt_no, owner, started_at)
    SELECT tenant_id, effect_id, attempts, lease_owner, updated_at FROM moved
)
-- Only what the write changed comes back; the caller holds the rest of the row.
SELECT moved.batch_ord, moved.version, moved.attempts, moved.lease_expires_at,
       moved.due_at, moved.first_dispatched_at, moved.retention_deadline,
       moved.settlement_deadline, moved.updated_at, append_effect_event(
    moved.tenant_id, moved.effect_id, moved.version, 'dispatch', moved.batch_from,
    'dispatching', moved.lease_owner, jsonb_build_object('attempt', moved.attempts),
    moved.updated_at
) IS NOT NULL AS event_written
FROM moved;

-- start_attempt_batch_of_tenant --
-- start_attempt_batch within tenant $9, as one call run whole on the tenant's shard.
SELECT batch_ord, (effect).version, (effect).attempts, (effect).lease_expires_at,
       (effect).due_at, (effect).first_dispatched_at, (effect).retention_deadline,
       (effect).settlement_deadline, (effect).updated_at, true AS event_written
FROM start_attempts_of_tenant($9, $1, $2, $3, $4, $5, $6, $7, $8);

-- record_receipt_batch --
-- record_receipt for many effects at once; an effect fenced by its version is missing.
WITH v AS (
    SELECT * FROM unnest(
        $1::uuid[], $2::bigint[], $3::text[], $4::text[], $5::text[], $6::text[],
        $7::integer[], $8::bytea[], $9::text[], $10::text[], $11::text[], $12::text[]
    ) WITH ORDINALITY AS v (effect_id, version, from_status, to_status, kind, actor,
                            status_code, ciphertext, source, external_id, details,
                            tenant_id, ord)
), moved AS (
    UPDATE effects AS e SET
        status = v.to_status,
        version = e.version + 1,
        lease_owner = NULL,
        lease_expires_at = NULL,
        due_at = NULL,
        last_error = NULL,
        updated_at = now()
    FROM v
    WHERE e.tenant_id = v.tenant_id AND e.effect_id = v.effect_id
      AND e.version = v.version AND e.status = v.from_status
    RETURNING e.tenant_id, e.effect_id, e.version, e.status, e.updated_at,
              v.ord AS batch_ord, v.from_status AS batch_from, v.kind AS batch_kind,
              v.actor AS batch_actor, v.status_code AS batch_status_code,
              v.ciphertext AS batch_ciphertext, v.source AS batch_source,
              v.external_id AS batch_external_id, v.details AS batch_details
), receipt AS (
    INSERT INTO effect_receipts (tenant_id, effect_id, status_code, response_ciphertext,
                                 source, external_id, recorded_at)
    SELECT tenant_id, effect_id, batch_status_code, batch_ciphertext, batch_source,
           batch_external_id, updated_at
    FROM moved
), event AS (
    SELECT moved.*, prev.digest AS prev_digest, d.details
    FROM moved
    CROSS JOIN LATERAL (
        SELECT jsonb_build_object('status_code', moved.batch_status_code,
                                  'source', moved.batch_source,
                                  'external_id', moved.batch_external_id)
               || moved.batch_details::jsonb AS details
    ) AS d
    LEFT JOIN effect_events AS prev
        ON prev.tenant_id = moved.tenant_id AND prev.effect_id = moved.effect_id
       AND prev.seq = moved.version - 1
), chained AS (
    INSERT INTO effect_events (tenant_id, effect_id, seq, kind, from_status, to_status,
                               actor, details, occurred_at, prev_digest, digest)
    SELECT tenant_id, effect_id, version, batch_kind, batch_from, status, batch_actor,
           details, updated_at, prev_digest,
           effect_event_digest(prev_digest, effect_id, version, batch_kind, batch_from,
                               status, batch_actor, details, updated_at)
    FROM event
)
-- Only what the write changed comes back; the caller holds the rest of the row.
SELECT batch_ord, version, updated_at, true AS event_written FROM moved;

-- record_receipt_batch_of_tenant --
-- record_receipt_batch within tenant $13, as one call run whole on the tenant's shard.
SELECT batch_ord, (effect).version, (effect).updated_at, true AS event_written
FROM record_receipts_of_tenant($13, $1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12);

-- transition --
-- Compare-and-swap to a new status; set or drop the lease and the next wake-up time.
WITH clock AS (
    -- Every time the write stamps, computed first (see start_attempt).
    SELECT now() AS at, now() + $8::interval AS lease_end,
           coalesce(now() + $8::interval, now() + $9::interval) AS due,
           now() + $12::interval AS settle_end
), moved AS (
    UPDATE effects AS e SET
        status = $4,
        version = e.version + 1,
        lease_owner = $7,
        lease_expires_at = clock.lease_end,
        due_at = clock.due,
        settlement_deadline = coalesce(clock.settle_end, e.settlement_deadline),
        last_error = $10,
        updated_at = clock.at
    FROM clock
    WHERE e.tenant_id = $13 AND e.effect_id = $1 AND e.version = $2 AND e.status = $3
    RETURNING e.*
), chained AS (
    -- The new version's predecessor event; a missing one leaves the digest NULL, which
    -- the events' NOT NULL refuses, so a chain never restarts silently.
    SELECT moved.*, prev.digest AS prev_digest, $11::jsonb AS event_details
    FROM moved
    LEFT JOIN effect_events AS prev
        ON prev.tenant_id = $13 AND prev.effect_id = moved.effect_id
       AND prev.seq = moved.version - 1
), event AS (
    INSERT INTO effect_events (tenant_id, effect_id, seq, kind, from_status, to_status,
                               actor, details, occurred_at, prev_digest, digest)
    SELECT tenant_id, effect_id, version, $5::text, $3::text, $4::text, $6::text,
           event_details, updated_at, prev_digest,
           effect_event_digest(prev_digest, effect_id, version, $5::text, $3::text,
                               $4::text, $6::text, event_details, updated_at)
    FROM chained
)
SELECT moved.*, true AS event_written
FROM moved;

-- transition_call --
-- transition as one call of its function, run whole on the tenant's shard.
SELECT e.*, true AS event_written
FROM transition_effect($13, $1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12) AS e;

-- record_receipt --
-- Settle the effect (SUCCEEDED or FAILED_FINAL) and store its immutable receipt together.
WITH moved AS (
    UPDATE effects SET
        status = $4,
        version = version + 1,
        lease_owner = NULL,
        lease_expires_at = NULL,
        due_at = NULL,
        last_error = NULL,
        updated_at = now()
    WHERE tenant_id = $12 AND effect_id = $1 AND version = $2 AND status = $3
    RETURNING tenant_id, effect_id, version, updated_at
), receipt AS (
    INSERT INTO effect_receipts (tenant_id, effect_id, status_code, response_ciphertext,
                                 source, external_id, recorded_at)
    SELECT tenant_id, effect_id, $7, $8, $9, $10, updated_at FROM moved
)
-- Only what the write changed comes back; the caller holds the rest of the row.
SELECT moved.version, moved.updated_at, append_effect_event(
    moved.tenant_id, moved.effect_id, moved.version, $5, $3, $4, $6,
    jsonb_build_object('status_code', $7::integer, 'source', $9::text,
                       'external_id', $10::text) || $11::jsonb,
    moved.updated_at
) IS NOT NULL AS event_written
FROM moved;

-- record_receipt_call --
-- record_receipt as one call of its function, run whole on the tenant's shard.
SELECT e.version, e.updated_at, true AS event_written
FROM record_receipt_effect($12, $1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11) AS e;

-- reschedule --
-- Keep the status, drop the lease and set the next wake-up time (a backoff, a wait).
WITH moved AS (
    UPDATE effects SET
        version = version + 1,
        lease_owner = NULL,
        lease_expires_at = NULL,
        due_at = now() + $4::interval,  -- NULL: nothing is due until an operator acts
        last_error = coalesce($6, last_error),
        updated_at = now()
    WHERE tenant_id = $7 AND effect_id = $1 AND version = $2 AND status = $3
    RETURNING effects.*
), chained AS (
    -- The new version's predecessor event; a missing one leaves the digest NULL, which
    -- the events' NOT NULL refuses, so a chain never restarts silently.
    SELECT moved.*, prev.digest AS prev_digest,
           jsonb_build_object('delay_seconds', extract(epoch FROM $4::interval))
               AS event_details
    FROM moved
    LEFT JOIN effect_events AS prev
        ON prev.tenant_id = $7 AND prev.effect_id = moved.effect_id
       AND prev.seq = moved.version - 1
), event AS (
    INSERT INTO effect_events (tenant_id, effect_id, seq, kind, from_status, to_status,
                               actor, details, occurred_at, prev_digest, digest)
    SELECT tenant_id, effect_id, version, 'rescheduled', $3::text, $3::text, $5::text,
           event_details, updated_at, prev_digest,
           effect_event_digest(prev_digest, effect_id, version, 'rescheduled', $3::text,
                               $3::text, $5::text, event_details, updated_at)
    FROM chained
)
SELECT moved.*, true AS event_written
FROM moved;

-- reschedule_call --
-- reschedule as one call of its function, run whole on the tenant's shard.
SELECT e.*, true AS event_written
FROM reschedule_effect($7, $1, $2, $3, $4, $5, $6) AS e;

-- renew_lease --
-- Extend the lease of an attempt still sending or streaming, only for its holder.
WITH moved AS (
    UPDATE effects SET
        version = version + 1,
        lease_expires_at = now() + $4::interval,
        due_at = now() + $4::interval,
        updated_at = now()
    WHERE tenant_id = $5 AND effect_id = $1 AND version = $2 AND status = 'dispatching'
      AND lease_owner = $3
    RETURNING effects.*
), chained AS (
    -- The new version's predecessor event; a missing one leaves the digest NULL, which
    -- the events' NOT NULL refuses, so a chain never restarts silently.
    SELECT moved.*, prev.digest AS prev_digest,
           jsonb_build_object('lease_seconds', extract(epoch FROM $4::interval))
               AS event_details
    FROM moved
    LEFT JOIN effect_events AS prev
        ON prev.tenant_id = $5 AND prev.effect_id = moved.effect_id
       AND prev.seq = moved.version - 1
), event AS (
    INSERT INTO effect_events (tenant_id, effect_id, seq, kind, from_status, to_status,
                               actor, details, occurred_at, prev_digest, digest)
    SELECT tenant_id, effect_id, version, 'lease_renewed', 'dispatching', 'dispatching',
           $3::text, event_details, updated_at, prev_digest,
           effect_event_digest(prev_digest, effect_id, version, 'lease_renewed',
                               'dispatching', 'dispatching', $3::text, event_details,
                               updated_at)
    FROM chained
)
SELECT moved.*, true AS event_written
FROM moved;

-- renew_lease_call --
-- renew_lease as one call of its function, run whole on the tenant's shard.
SELECT e.*, true AS event_written
FROM renew_lease_effect($5, $1, $2, $3, $4) AS e;

-- claim_due --
-- Lease up to $1 effects whose wake-up time has passed, skipping rows others hold.
SELECT * FROM claim_due_effects($1, $2, $3);

-- tenants_due --
-- The tenants with due effects, oldest wake-up first, without locking (sharded ledger).
SELECT tenant_id FROM effects
WHERE due_at <= now()
GROUP BY tenant_id
ORDER BY min(due_at), tenant_id
LIMIT $1;

-- claim_due_of_tenant --
-- claim_due within tenant $4, as one call run whole on the tenant's shard.
SELECT (effect).*, previous_owner, true AS event_written
FROM claim_due_effects_of_tenant($4, $1, $2, $3);

-- prune_settled --
-- Delete up to $3 settled effects, whole, past their contract's ledger retention.
WITH retention AS (
    -- ($1 contract name, $2 retention), for every version of the name; effects of a
    -- contract not named are kept. An effect whose key retention is still ahead is
    -- kept too, so a replay after pruning is a new effect only once the target may
    -- have forgotten the key as well.
    SELECT * FROM unnest($1::text[], $2::interval[]) AS r (contract_name, kept_for)
), doomed AS (
    SELECT e.tenant_id, e.effect_id FROM retention AS r
    CROSS JOIN LATERAL (
        SELECT tenant_id, effect_id FROM effects
        WHERE status IN ('succeeded', 'failed_final')
          AND contract_name = r.contract_name
          AND updated_at < now() - r.kept_for
          AND (retention_deadline IS NULL OR retention_deadline < now())
        ORDER BY updated_at
        LIMIT $3
        FOR UPDATE SKIP LOCKED
    ) AS e
    LIMIT $3
)
DELETE FROM effects AS e USING doomed
WHERE e.tenant_id = doomed.tenant_id AND e.effect_id = doomed.effect_id
  AND e.status IN ('succeeded', 'failed_final')
RETURNING e.route;

-- tenants_prunable --
-- The tenants with settled effects past retention ($1 names, $2 kept for), unlocked.
SELECT e.tenant_id FROM effects AS e
JOIN unnest($1::text[], $2::interval[]) AS r (contract_name, kept_for)
    ON e.contract_name = r.contract_name
WHERE e.status IN ('succeeded', 'failed_final')
  AND e.updated_at < now() - r.kept_for
  AND (e.retention_deadline IS NULL OR e.retention_deadline < now())
GROUP BY e.tenant_id
ORDER BY min(e.updated_at), e.tenant_id
LIMIT $3;

-- prune_settled_of_tenant --
-- prune_settled within tenant $4, on its shard.
WITH doomed AS (
    SELECT e.tenant_id, e.effect_id FROM effects AS e
    JOIN unnest($1::text[], $2::interval[]) AS r (contract_name, kept_for)
        ON e.contract_name = r.contract_name
    WHERE e.tenant_id = $4
      AND e.status IN ('succeeded', 'failed_final')
      AND e.updated_at < now() - r.kept_for
      AND (e.retention_deadline IS NULL OR e.retention_deadline < now())
    ORDER BY e.updated_at
    LIMIT $3
    FOR UPDATE OF e SKIP LOCKED
)
DELETE FROM effects AS e USING doomed
WHERE e.tenant_id = $4 AND e.effect_id = doomed.effect_id
  AND e.status IN ('succeeded', 'failed_final')
RETURNING e.route;

-- get_effect --
-- One effect of one tenant.
SELECT * FROM effects WHERE tenant_id = $1 AND effect_id = $2;

-- effect_versions --
-- Awaited effects' versions, whether their leases ran out, and the database's time.
SELECT now() AS observed_at, e.effect_id, e.version,
       coalesce(e.lease_expires_at <= now(), false) AS lease_expired
FROM unnest($1::text[], $2::uuid[]) AS w (tenant_id, effect_id)
JOIN effects AS e ON e.tenant_id = w.tenant_id AND e.effect_id = w.effect_id;

-- get_effect_by_key --
-- One effect of one tenant by its operation key.
SELECT * FROM effects WHERE tenant_id = $1 AND operation_key = $2;

-- list_effects --
-- A page of one tenant's effects, newest first, with optional filters and a cursor.
SELECT * FROM effects
WHERE tenant_id = $1
  AND ($2::text[] IS NULL OR status = ANY($2::text[]))
  AND ($3::text IS NULL OR route = $3)
  AND ($4::text IS NULL OR starts_with(operation_key, $4))
  AND ($5::timestamptz IS NULL OR created_at <= $5)
  AND ($6::timestamptz IS NULL OR (created_at, effect_id) < ($6, $7::uuid))
ORDER BY created_at DESC, effect_id DESC
LIMIT $8;

-- get_receipt --
-- The receipt of one tenant's effect.
SELECT * FROM effect_receipts WHERE tenant_id = $1 AND effect_id = $2;

-- list_events --
-- The history of one tenant's effect, oldest first.
SELECT * FROM effect_events WHERE tenant_id = $1 AND effect_id = $2 ORDER BY seq;

-- list_attempts --
-- The dispatch attempts of one tenant's effect.
SELECT * FROM effect_attempts WHERE tenant_id = $1 AND effect_id = $2 ORDER BY attempt_no;

-- verify_events --
-- The first sequence whose digest, link or position does not hold, or NULL.
WITH chain AS (
    SELECT seq, digest, prev_digest,
           row_number() OVER (ORDER BY seq) AS position,
           lag(digest) OVER (ORDER BY seq) AS previous,
           effect_event_digest(prev_digest, effect_id, seq, kind, from_status, to_status,
                               actor, details, occurred_at) AS recomputed
    FROM effect_events WHERE tenant_id = $1 AND effect_id = $2
)
SELECT min(seq) AS first_bad_seq FROM chain
WHERE seq <> position
   OR digest <> recomputed
   OR prev_digest <> coalesce(previous, '\x'::bytea);

-- record_master_key --
-- Remember that this master key encrypts payloads here.
INSERT INTO master_keys (key_id) VALUES ($1) ON CONFLICT (key_id) DO NOTHING;

-- list_master_keys --
-- Every master key that has encrypted payloads in this database.
SELECT key_id, first_used FROM master_keys ORDER BY first_used;

-- ping --
-- Cheapest proof that the database answers.
SELECT 1;

-- add_tenant --
-- Create a tenant if it does not exist yet.
INSERT INTO tenants (tenant_id) VALUES ($1) ON CONFLICT (tenant_id) DO NOTHING;

-- add_api_key --
-- Store the hash of a new API key for a tenant.
INSERT INTO tenant_api_keys (key_id, tenant_id, secret_hash) VALUES ($1, $2, $3);

-- get_api_key --
-- The tenant and secret hash of a live (not revoked) API key.
SELECT tenant_id, secret_hash FROM tenant_api_keys
WHERE key_id = $1 AND revoked_at IS NULL;

-- unknown_summary --
-- Effects waiting on a proof or a person, across tenants, by route and status.
SELECT route, status, count(*) AS effects, min(updated_at) AS oldest
FROM effects
WHERE status IN ('outcome_unknown', 'manual_review')
GROUP BY route, status;

-- recent_duplicate --
-- The newest live effect on a route with the same request as a key new to the ledger.
SELECT e.effect_id, e.operation_key, e.created_at
FROM effects e
WHERE e.tenant_id = $1 AND e.route = $2 AND e.request_hash = $3
  AND e.created_at > now() - $5::interval
  AND e.operation_key <> $4
  -- one that failed for good did not happen: a new key is how it is tried again
  AND e.status <> 'failed_final'
  AND NOT EXISTS (
      SELECT 1 FROM effects k WHERE k.tenant_id = $1 AND k.operation_key = $4)
ORDER BY e.created_at DESC
LIMIT 1;

-- operation_key_usage --
-- Per route, effects created in the last $1 and how many distinct requests they carry.
WITH RECURSIVE tenant AS (
    -- Tenant by tenant on (tenant_id, created_at), the tenants found by skipping through
    -- the primary key: no index leads with created_at, so this never reads the ledger.
    (SELECT tenant_id FROM effects ORDER BY tenant_id LIMIT 1)
    UNION ALL
    SELECT (SELECT e.tenant_id FROM effects AS e WHERE e.tenant_id > t.tenant_id
            ORDER BY e.tenant_id LIMIT 1)
    FROM tenant AS t WHERE t.tenant_id IS NOT NULL
)
SELECT u.route, sum(u.effects)::bigint AS effects, sum(u.requests)::bigint AS requests
FROM tenant AS t CROSS JOIN LATERAL (
    -- a request is (tenant, request hash), so per tenant distinct hashes add up
    SELECT route, count(*) AS effects, count(DISTINCT request_hash) AS requests
    FROM effects
    WHERE tenant_id = t.tenant_id AND created_at > now() - $1::interval
    GROUP BY route
) AS u
GROUP BY u.route;

-- ledger_tables_without_autovacuum --
-- Ledger tables autovacuum skips: all when the server's is off, else tables that opt out.
SELECT c.relname::text AS table_name
FROM pg_class c
WHERE c.oid = ANY (ARRAY['effects', 'effect_attempts', 'effect_receipts',
                         'effect_events']::regclass[])
  AND (NOT current_setting('autovacuum')::boolean
       OR NOT current_setting('track_counts')::boolean
       OR EXISTS (SELECT 1 FROM unnest(c.reloptions) AS option
                  WHERE option ~* '^autovacuum_enabled=(false|off|no|f|n|0)$'))
ORDER BY c.relname;

-- clock --
-- The database's idea of now, to measure clock skew against leases.
SELECT now() AS now;

-- master_key_ids_of_payloads --
-- How many stored payloads each master key protects, by kind, from each blob's header.
SELECT key_id, kind, count(*) AS payloads, min(effect_id::text) AS example
FROM (
    SELECT convert_from(substring(request_ciphertext FROM 3
                                  FOR get_byte(request_ciphertext, 1)), 'UTF8') AS key_id,
           'request' AS kind, effect_id
    FROM effects WHERE request_ciphertext IS NOT NULL
    UNION ALL
    SELECT convert_from(substring(response_ciphertext FROM 3
                                  FOR get_byte(response_ciphertext, 1)), 'UTF8'),
           'receipt', effect_id
    FROM effect_receipts
    UNION ALL
    SELECT convert_from(substring(ciphertext FROM 3 FOR get_byte(ciphertext, 1)), 'UTF8'),
           'idempotency root', NULL
    FROM idempotency_root
) AS sealed
GROUP BY key_id, kind
ORDER BY key_id, kind;

-- requests_not_under_key --
-- A batch of stored requests sealed under another key than $1, after effect $2.
SELECT effect_id, tenant_id, request_ciphertext AS ciphertext
FROM effects
WHERE effect_id > $2 AND request_ciphertext IS NOT NULL
  AND substring(request_ciphertext FROM 3 FOR get_byte(request_ciphertext, 1))
      <> convert_to($1, 'UTF8')
ORDER BY effect_id
LIMIT $3;

-- receipts_not_under_key --
-- A batch of receipts sealed under another key than $1, after effect $2.
SELECT effect_id, tenant_id, response_ciphertext AS ciphertext
FROM effect_receipts
WHERE effect_id > $2
  AND substring(response_ciphertext FROM 3 FOR get_byte(response_ciphertext, 1))
      <> convert_to($1, 'UTF8')
ORDER BY effect_id
LIMIT $3;

-- reseal_requests --
-- Swap re-encrypted requests in, each only if its ciphertext is still the one read.
UPDATE effects AS e SET request_ciphertext = v.fresh
FROM unnest($1::text[], $2::uuid[], $3::bytea[], $4::bytea[])
    AS v (tenant_id, effect_id, old, fresh)
WHERE e.tenant_id = v.tenant_id AND e.effect_id = v.effect_id
  AND e.request_ciphertext = v.old
RETURNING e.effect_id;

-- reseal_receipts --
-- Swap re-encrypted receipts in, each only if its ciphertext is still the one read.
UPDATE effect_receipts AS r SET response_ciphertext = v.fresh
FROM unnest($1::text[], $2::uuid[], $3::bytea[], $4::bytea[])
    AS v (tenant_id, effect_id, old, fresh)
WHERE r.tenant_id = v.tenant_id AND r.effect_id = v.effect_id
  AND r.response_ciphertext = v.old
RETURNING r.effect_id;

-- get_idempotency_root --
-- The sealed idempotency root, if the ledger has one yet.
SELECT ciphertext FROM idempotency_root WHERE id = 1;

-- add_idempotency_root --
-- Store a sealed idempotency root unless one exists; the first start wins a race.
INSERT INTO idempotency_root (id, ciphertext) VALUES (1, $1) ON CONFLICT (id) DO NOTHING;

-- reseal_idempotency_root --
-- Swap the re-encrypted root in only if it is still the one read.
UPDATE idempotency_root SET ciphertext = $2 WHERE id = 1 AND ciphertext = $1;

-- retire_master_keys --
-- Forget master keys neither kept ($1) nor named by a stored payload ($2).
DELETE FROM master_keys WHERE key_id <> ALL($1::text[]) AND key_id <> ALL($2::text[]);

-- begin_mcp_call --
-- Note a recorded MCP call as running until $3 from now; prune a few rows past theirs.
WITH pruned AS (
    -- The oldest first, off the expiry index; deleted through = ANY of an array, which
    -- reads the primary key where a join to the ids may hash a scan of the table.
    DELETE FROM mcp_running_calls
    WHERE running_id = ANY (ARRAY(
        SELECT running_id FROM mcp_running_calls
        WHERE expires_at < now()
        ORDER BY expires_at
        LIMIT 100
        FOR UPDATE SKIP LOCKED
    ))
)
INSERT INTO mcp_running_calls (running_id, call_key, expires_at)
VALUES ($1, $2, now() + $3::interval);

-- end_mcp_call --
-- The call settled (or its task ended): it no longer withholds cancellations.
DELETE FROM mcp_running_calls WHERE running_id = $1;

-- mcp_call_running --
-- Whether any worker runs a recorded MCP call under this key (rows past expiry: no).
SELECT EXISTS (
    SELECT 1 FROM mcp_running_calls WHERE call_key = $1 AND expires_at > now()
);
