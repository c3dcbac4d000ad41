-- 0009: the event digest is declared as stable as what it calls (concat_ws is STABLE), so
-- PostgreSQL inlines it into each caller's cached plan. Declared IMMUTABLE it could not be
-- inlined, and its body was planned again in every transaction that appended an event:
-- about 20 µs of database time per event, three events per new effect. Same expression,
-- same digests.
ALTER FUNCTION effect_event_digest(
    bytea, uuid, bigint, text, text, text, text, jsonb, timestamptz
) STABLE;
