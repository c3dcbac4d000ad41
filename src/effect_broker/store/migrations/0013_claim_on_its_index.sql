-- 0013: the reconciler's claim stays on its indexes whatever the planner guesses.
--
-- The claim was one statement: lock up to $1 due effects, then UPDATE effects joined to
-- them. Under a generic plan (a prepared statement after a few runs) the planner cannot
-- see the limit and assumes a tenth of the due rows; on a ledger never analyzed (a new
-- one, autovacuum off) it then joins by hashing a sequential scan of all of effects, at
-- every claim, for a handful of rows. Here each claimed row is updated by its primary
-- key, which no estimate makes a scan of; the due rows still come off effects_due in
-- due order, locked and skipped exactly as before.
CREATE FUNCTION claim_due_effects(p_limit integer, p_owner text, p_lease interval)
RETURNS SETOF effects
LANGUAGE plpgsql AS $$
DECLARE
    v_due record;
    v_effect effects;
BEGIN
    FOR v_due IN
        SELECT tenant_id, effect_id, lease_owner FROM effects
        WHERE due_at <= now()
        ORDER BY due_at
        LIMIT p_limit
        FOR UPDATE SKIP LOCKED
    LOOP
        UPDATE effects SET
            version = version + 1,
            lease_owner = p_owner,
            lease_expires_at = now() + p_lease,
            due_at = now() + p_lease,
            updated_at = now()
        WHERE tenant_id = v_due.tenant_id AND effect_id = v_due.effect_id
        RETURNING * INTO v_effect;
        PERFORM append_effect_event(
            v_effect.tenant_id, v_effect.effect_id, v_effect.version, 'claimed',
            v_effect.status, v_effect.status, p_owner,
            jsonb_build_object('previous_owner', v_due.lease_owner), v_effect.updated_at);
        RETURN NEXT v_effect;
    END LOOP;
END
$$;
