-- 0008: receipts a transactional target's kit gave back by attempt key: the answer an
-- attempt committed with, found by the lookup (or by a tombstone the kit refused
-- because that attempt had committed), after the proxy lost it.

ALTER TABLE effect_receipts DROP CONSTRAINT effect_receipts_source_check;
ALTER TABLE effect_receipts ADD CONSTRAINT effect_receipts_source_check
    CHECK (source IN ('response', 'probe', 'operator', 'proxy', 'lookup'));
