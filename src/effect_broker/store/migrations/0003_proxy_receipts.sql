-- 0003: receipts the proxy writes itself: an effect given up after its retry limit,
-- every attempt of which provably sent nothing.

ALTER TABLE effect_receipts DROP CONSTRAINT effect_receipts_source_check;
ALTER TABLE effect_receipts ADD CONSTRAINT effect_receipts_source_check
    CHECK (source IN ('response', 'probe', 'operator', 'proxy'));
