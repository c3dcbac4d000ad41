-- effect-broker target kit, migration 0001: one row per attempt key.
--
-- The primary key is the whole mechanism: an attempt's receipt and the proxy's tombstone
-- are rows under the same key, so at most one of the two transactions can ever commit.
-- Every migration of the kit is written to be re-run safely (IF NOT EXISTS), so
-- install() can apply them all at every start without keeping a version table.
CREATE TABLE IF NOT EXISTS effect_broker_attempts (
    attempt_key text PRIMARY KEY,
    state       text NOT NULL CHECK (state IN ('committed', 'tombstoned')),
    -- The response the attempt committed with; NULL on a tombstone.
    status      integer CHECK (status BETWEEN 100 AND 599),
    headers     jsonb,
    body        bytea,
    -- clock_timestamp(), not now(): the receipt is the last statement of its
    -- transaction, so this is close to when it committed, not when the request began.
    at          timestamptz NOT NULL DEFAULT clock_timestamp(),
    CONSTRAINT effect_broker_attempts_answer CHECK (
        (state = 'committed') = (status IS NOT NULL AND headers IS NOT NULL
                                 AND body IS NOT NULL)
    )
);
