-- 0007: a ledger that stays small. Settled effects past their contract's
-- ledger_retention are pruned, whole, in bounded batches (the prune_settled query);
-- nothing else may delete from the ledger, and no unsettled effect can be deleted at all.

-- Fewer index entries per effect: (tenant_id, status) was written twice per effect
-- (insert and settlement) and read by no hot query. Listings by status use the
-- (tenant_id, created_at) index; the metrics summary of effects awaiting proof or a
-- person, and the pruner, get partial indexes that hold only the rows they look at.
DROP INDEX effects_tenant_status;
CREATE INDEX effects_awaiting ON effects (route, status)
    WHERE status IN ('outcome_unknown', 'manual_review');
CREATE INDEX effects_settled ON effects (contract_name, updated_at)
    WHERE status IN ('succeeded', 'failed_final');

-- Deleting an effect takes its attempts, receipt and events with it, and only a
-- settled effect can be deleted. A receipt or event stays undeletable on its own: its
-- trigger lets it go only when its effect is already gone (the cascade of a whole
-- effect's deletion), so the history of a live effect can never be trimmed.
CREATE FUNCTION refuse_unsettled_delete() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    IF OLD.status NOT IN ('succeeded', 'failed_final') THEN
        RAISE EXCEPTION 'effect % is %: only settled effects may leave the ledger',
            OLD.effect_id, OLD.status USING ERRCODE = 'restrict_violation';
    END IF;
    RETURN OLD;
END
$$;

CREATE TRIGGER effects_only_settled_deleted
    BEFORE DELETE ON effects
    FOR EACH ROW EXECUTE FUNCTION refuse_unsettled_delete();

CREATE FUNCTION refuse_delete_of_live_effect() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    IF TG_OP <> 'DELETE'
        OR EXISTS (SELECT 1 FROM effects WHERE effect_id = OLD.effect_id)
    THEN
        RAISE EXCEPTION '% is append-only: % refused (only a whole settled effect '
            'leaves the ledger)', TG_TABLE_NAME, TG_OP
            USING ERRCODE = 'restrict_violation';
    END IF;
    RETURN OLD;
END
$$;

DROP TRIGGER effect_receipts_no_delete ON effect_receipts;
CREATE TRIGGER effect_receipts_no_delete
    BEFORE DELETE ON effect_receipts
    FOR EACH ROW EXECUTE FUNCTION refuse_delete_of_live_effect();

DROP TRIGGER effect_events_append_only ON effect_events;
CREATE TRIGGER effect_events_append_only
    BEFORE UPDATE OR DELETE ON effect_events
    FOR EACH ROW EXECUTE FUNCTION refuse_delete_of_live_effect();

ALTER TABLE effect_attempts DROP CONSTRAINT effect_attempts_effect_id_fkey,
    ADD CONSTRAINT effect_attempts_effect_id_fkey
        FOREIGN KEY (effect_id) REFERENCES effects (effect_id) ON DELETE CASCADE;
ALTER TABLE effect_receipts DROP CONSTRAINT effect_receipts_effect_id_fkey,
    ADD CONSTRAINT effect_receipts_effect_id_fkey
        FOREIGN KEY (effect_id) REFERENCES effects (effect_id) ON DELETE CASCADE;
ALTER TABLE effect_events DROP CONSTRAINT effect_events_effect_id_fkey,
    ADD CONSTRAINT effect_events_effect_id_fkey
        FOREIGN KEY (effect_id) REFERENCES effects (effect_id) ON DELETE CASCADE;
