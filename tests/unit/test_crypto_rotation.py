"""Several master keys in one keyring: the first encrypts, each opens its own blobs."""

from __future__ import annotations

import pytest

from effect_broker.crypto import Keyring, MasterKey, blob_key_id
from effect_broker.errors import DecryptionError, MasterKeyError

OLD, NEW = MasterKey(bytes(range(32))), MasterKey(bytes(range(1, 33)))
WHERE = {"tenant_id": "acme", "effect_id": "e-1", "kind": "response"}


def test_the_first_key_encrypts_and_every_key_decrypts() -> None:
    sealed_old = Keyring(OLD).encrypt(**WHERE, plaintext=b"receipt")
    both = Keyring([NEW, OLD])
    sealed_new = both.encrypt(**WHERE, plaintext=b"receipt")

    assert blob_key_id(sealed_new) == NEW.key_id
    assert both.decrypt(**WHERE, blob=sealed_old) == b"receipt"
    assert Keyring(NEW).decrypt(**WHERE, blob=sealed_new) == b"receipt"
    with pytest.raises(DecryptionError, match=f"encrypted under key {OLD.key_id}"):
        Keyring(NEW).decrypt(**WHERE, blob=sealed_old)


def test_reseal_moves_a_blob_to_the_first_key_with_the_same_plaintext() -> None:
    sealed = Keyring(OLD).encrypt(**WHERE, plaintext=b"\x00body")
    fresh = Keyring([NEW, OLD]).reseal(**WHERE, blob=sealed)

    assert blob_key_id(fresh) == NEW.key_id
    assert len(fresh) == len(sealed)
    assert Keyring(NEW).decrypt(**WHERE, blob=fresh) == b"\x00body"
    with pytest.raises(DecryptionError):
        Keyring([NEW, OLD]).reseal(**{**WHERE, "effect_id": "e-2"}, blob=sealed)


def test_the_hmac_key_follows_the_root_not_the_encrypting_key() -> None:
    root = bytes(32)
    assert (
        Keyring([OLD], hmac_root=root).tenant_hmac_key("acme")
        == Keyring([NEW, OLD], hmac_root=root).tenant_hmac_key("acme")
        == Keyring(NEW).with_hmac_root(root).tenant_hmac_key("acme")
    )
    assert Keyring(OLD).tenant_hmac_key("acme") != Keyring(NEW).tenant_hmac_key("acme")


@pytest.mark.parametrize(
    ("value", "message"),
    [
        ("", "EFFECT_BROKER_MASTER_KEYS is empty"),
        (f"{OLD.to_base64()},", "key 2 of 2 is empty"),
        (f"{OLD.to_base64()},abc", "(key 2) decodes to 2 bytes"),
        (f"{OLD.to_base64()}, {OLD.to_base64()}", "keys 1 and 2 are the same key"),
    ],
)
def test_a_bad_key_list_is_one_clear_line(value: str, message: str) -> None:
    with pytest.raises(MasterKeyError) as caught:
        MasterKey.list_from_base64(value)
    assert message in caught.value.message
    assert "\n" not in caught.value.message
    assert OLD.to_base64() not in caught.value.message


def test_a_key_list_keeps_its_order() -> None:
    keys = MasterKey.list_from_base64(f" {NEW.to_base64()} ,{OLD.to_base64()}")
    assert [key.key_id for key in keys] == [NEW.key_id, OLD.key_id]
    assert Keyring(keys).key_ids == (NEW.key_id, OLD.key_id)
