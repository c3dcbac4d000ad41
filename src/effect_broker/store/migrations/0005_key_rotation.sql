-- 0005: master key rotation. Receipts may be re-encrypted under another master key, and
-- nothing else about them may change; the idempotency root keeps downstream keys stable
-- across rotations.

-- A receipt stays immutable except for one kind of update: its response sealed again
-- under another master key the ledger knows. Everything the database can check is
-- checked: the same effect, status, source, external id and time; a ciphertext in the
-- blob format (version 1, a key id) naming a different key, and of the same length once
-- the key ids are set aside (AES-GCM keeps the length, so the payload length is the
-- same). The plaintext itself the database cannot see: `effect-broker keys rotate` is
-- the only writer, and it decrypts, re-encrypts the same bytes and checks that the new
-- blob opens to them before it writes (compare-and-swap on the old ciphertext).
CREATE FUNCTION allow_receipt_reencryption() RETURNS trigger
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
    IF NEW.effect_id IS DISTINCT FROM OLD.effect_id
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

DROP TRIGGER effect_receipts_immutable ON effect_receipts;
CREATE TRIGGER effect_receipts_no_delete
    BEFORE DELETE ON effect_receipts
    FOR EACH ROW EXECUTE FUNCTION refuse_mutation();
CREATE TRIGGER effect_receipts_reencryption_only
    BEFORE UPDATE ON effect_receipts
    FOR EACH ROW EXECUTE FUNCTION allow_receipt_reencryption();

-- The secret downstream idempotency keys derive from, sealed under a master key. One
-- row; created at the first start, re-sealed by rotations, never changed.
CREATE TABLE idempotency_root (
    id          smallint PRIMARY KEY DEFAULT 1 CHECK (id = 1),
    ciphertext  bytea NOT NULL,
    created_at  timestamptz NOT NULL DEFAULT now()
);
