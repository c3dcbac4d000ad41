"""Master key handling, per-tenant key derivation and bound payload encryption."""

from __future__ import annotations

import base64
import re
from collections.abc import Callable

import pytest

from effect_broker.canonical import downstream_key
from effect_broker.crypto import BLOB_VERSION, JOIN_PARTS_UP_TO, Keyring, MasterKey
from effect_broker.errors import DecryptionError, MasterKeyError

RAW = bytes(range(32))
MASTER = MasterKey(RAW)
OTHER = MasterKey(bytes(32))
KEYRING = Keyring(MASTER)
PLAINTEXT = b'{"amount":100,"card":"4242424242424242"}'
WHERE = {"tenant_id": "acme", "effect_id": "eff-1", "kind": "request"}


def _blob() -> bytes:
    return KEYRING.encrypt(**WHERE, plaintext=PLAINTEXT)


# --- MasterKey --------------------------------------------------------------------------


@pytest.mark.parametrize(
    "encoded",
    [
        base64.b64encode(RAW).decode(),
        base64.urlsafe_b64encode(RAW).decode(),
        base64.b64encode(RAW).decode().rstrip("="),
        "  " + base64.b64encode(RAW).decode() + "\n",
    ],
)
def test_from_base64_accepts_standard_and_urlsafe(encoded: str) -> None:
    assert MasterKey.from_base64(encoded) == MASTER


def test_from_base64_urlsafe_alphabet() -> None:
    raw = bytes([0xFB, 0xFF] * 16)  # encodes to "+" and "/" in standard base64
    standard = base64.b64encode(raw).decode()
    urlsafe = base64.urlsafe_b64encode(raw).decode()
    assert "+" in standard and "-" in urlsafe
    assert (
        MasterKey.from_base64(standard).raw == MasterKey.from_base64(urlsafe).raw == raw
    )


@pytest.mark.parametrize(
    ("value", "problem"),
    [
        (None, "is not set"),
        ("", "is not set"),
        ("   ", "is not set"),
        ("c2Vj!cmV0", "is not valid base64"),
        ("abcde", "is not valid base64"),
        (
            base64.b64encode(b"secret").decode(),
            "decodes to 6 bytes; it must be exactly 32",
        ),
        (base64.b64encode(bytes(31)).decode(), "decodes to 31 bytes"),
        (base64.b64encode(bytes(33)).decode(), "decodes to 33 bytes"),
    ],
)
def test_from_base64_refusals_name_the_source_and_the_fix(
    value: str | None, problem: str
) -> None:
    with pytest.raises(MasterKeyError) as caught:
        MasterKey.from_base64(value, source="--master-key")
    message = caught.value.message
    assert message.startswith("--master-key ")
    assert problem in message
    assert "base64.b64encode(os.urandom(32))" in message
    if value and value.strip():
        assert value not in message


def test_default_source_is_the_environment_variable() -> None:
    with pytest.raises(MasterKeyError, match=r"^EFFECT_BROKER_MASTER_KEY is not set"):
        MasterKey.from_base64(None)


@pytest.mark.parametrize("length", [0, 16, 31, 33])
def test_constructor_refuses_wrong_length(length: int) -> None:
    with pytest.raises(MasterKeyError, match="exactly 32 bytes"):
        MasterKey(bytes(length))


def test_generate_round_trips_through_base64() -> None:
    first, second = MasterKey.generate(), MasterKey.generate()
    assert len(first.raw) == 32
    assert first != second
    assert MasterKey.from_base64(first.to_base64()) == first


def test_repr_hides_the_key() -> None:
    for text in (repr(MASTER), str(MASTER), repr(KEYRING)):
        assert MASTER.key_id in text
        assert RAW.hex() not in text
        assert repr(RAW) not in text
        assert MASTER.to_base64() not in text
        assert base64.urlsafe_b64encode(RAW).decode() not in text


def test_key_id_is_short_stable_and_distinct() -> None:
    assert re.fullmatch(r"k1-[0-9a-f]{16}", MASTER.key_id)
    assert MasterKey(bytes(range(32))).key_id == MASTER.key_id
    assert OTHER.key_id != MASTER.key_id
    assert MASTER.key_id[3:] not in RAW.hex()


def test_master_key_is_frozen() -> None:
    with pytest.raises(AttributeError):
        MASTER.raw = bytes(32)  # type: ignore[misc]


# --- derived keys -----------------------------------------------------------------------

TENANTS = ["acme", "globex", "a", "", "a\x00data", "data", "tenant-hmac"]


def test_every_derived_key_is_distinct() -> None:
    keys = [KEYRING.tenant_hmac_key(t) for t in TENANTS]
    keys += [KEYRING.data_key(t) for t in TENANTS]
    assert all(len(key) == 32 for key in keys)
    assert len(set(keys)) == len(keys)


def test_hmac_key_differs_from_data_key() -> None:
    assert KEYRING.tenant_hmac_key("acme") != KEYRING.data_key("acme")


def test_derived_keys_survive_a_restart_and_depend_on_the_master() -> None:
    again = Keyring(MasterKey(RAW))
    assert again.tenant_hmac_key("acme") == KEYRING.tenant_hmac_key("acme")
    assert again.data_key("acme") == KEYRING.data_key("acme")
    assert Keyring(OTHER).data_key("acme") != KEYRING.data_key("acme")
    assert KEYRING.data_key("acme") not in (RAW, OTHER.raw)


def test_derived_keys_are_cached() -> None:
    keyring = Keyring(MASTER)
    assert keyring.data_key("acme") is keyring.data_key("acme")
    assert keyring.tenant_hmac_key("acme") is keyring.tenant_hmac_key("acme")


def test_same_operation_key_gives_distinct_downstream_keys_per_tenant() -> None:
    acme = downstream_key(KEYRING.tenant_hmac_key("acme"), "acme", "order-42")
    globex = downstream_key(KEYRING.tenant_hmac_key("globex"), "globex", "order-42")
    assert acme != globex


# --- encryption -------------------------------------------------------------------------


@pytest.mark.parametrize("plaintext", [b"", PLAINTEXT, bytes(range(256)) * 64])
def test_round_trip(plaintext: bytes) -> None:
    blob = KEYRING.encrypt(**WHERE, plaintext=plaintext)
    assert KEYRING.decrypt(**WHERE, blob=blob) == plaintext
    assert Keyring(MasterKey(RAW)).decrypt(**WHERE, blob=blob) == plaintext


def test_blob_layout_and_fresh_nonce() -> None:
    blob, again = _blob(), _blob()
    key_id = MASTER.key_id.encode()
    assert blob[0] == BLOB_VERSION
    assert blob[1:2] + blob[2 : 2 + len(key_id)] == bytes([len(key_id)]) + key_id
    assert len(blob) == 2 + len(key_id) + 12 + len(PLAINTEXT) + 16
    assert blob != again  # a fresh random nonce every time
    assert PLAINTEXT not in blob


@pytest.mark.parametrize(
    "moved",
    [
        {"effect_id": "eff-2"},
        {"tenant_id": "globex"},
        {"kind": "response"},
        {"effect_id": "eff-", "kind": "1request"},  # same bytes, split differently
    ],
)
def test_ciphertext_moved_elsewhere_fails(moved: dict[str, str]) -> None:
    with pytest.raises(DecryptionError) as caught:
        KEYRING.decrypt(**{**WHERE, **moved}, blob=_blob())
    assert "failed authentication" in caught.value.message


def test_every_tampered_byte_fails() -> None:
    blob = _blob()
    for index in range(len(blob)):
        tampered = bytearray(blob)
        tampered[index] ^= 0x01
        with pytest.raises(DecryptionError):
            KEYRING.decrypt(**WHERE, blob=bytes(tampered))


@pytest.mark.parametrize(
    ("blob", "problem"),
    [
        (b"", "it is empty"),
        (b"\x02" + bytes(60), "unknown format version 2"),
        (b"\x01\x13k1-", "too short"),
        (b"\x01", "too short"),
    ],
)
def test_malformed_blob_fails(blob: bytes, problem: str) -> None:
    with pytest.raises(DecryptionError, match="is malformed") as caught:
        KEYRING.decrypt(**WHERE, blob=blob)
    assert problem in caught.value.message


def test_truncated_blob_fails() -> None:
    with pytest.raises(DecryptionError):
        KEYRING.decrypt(**WHERE, blob=_blob()[:-1])


def test_wrong_master_key_names_both_key_ids() -> None:
    with pytest.raises(DecryptionError) as caught:
        Keyring(OTHER).decrypt(**WHERE, blob=_blob())
    message = caught.value.message
    assert f"encrypted under key {MASTER.key_id}" in message
    assert f"the configured master key is {OTHER.key_id}" in message


def test_error_messages_never_contain_plaintext_or_keys() -> None:
    blob = _blob()
    attempts: list[Callable[[], bytes]] = [
        lambda: Keyring(OTHER).decrypt(**WHERE, blob=blob),
        lambda: KEYRING.decrypt(**{**WHERE, "kind": "response"}, blob=blob),
        lambda: KEYRING.decrypt(**WHERE, blob=blob[:20]),
    ]
    secrets = [b"4242", RAW.hex().encode(), KEYRING.data_key("acme").hex().encode()]
    for attempt in attempts:
        with pytest.raises(DecryptionError) as caught:
            attempt()
        text = str(caught.value).encode()
        assert not any(secret in text for secret in secrets)
        assert caught.value.__cause__ is None


@pytest.mark.parametrize(
    "plaintext",
    [PLAINTEXT, PLAINTEXT * (JOIN_PARTS_UP_TO // len(PLAINTEXT) + 1)],
    ids=["joined", "past-the-join-limit"],
)
def test_parts_seal_to_a_blob_of_the_same_form_that_opens_to_their_join(
    plaintext: bytes,
) -> None:
    """``encrypt_parts`` is ``encrypt`` of the joined parts (another random nonce),
    small or past the size it joins them at: same length, opened by the same
    ``decrypt``, and bound to the same row and kind."""
    parts = [plaintext[:7], b"", plaintext[7:]]
    blob = KEYRING.encrypt_parts(**WHERE, parts=parts)
    whole = KEYRING.encrypt(**WHERE, plaintext=plaintext)
    assert len(blob) == len(whole)
    assert blob[:2] == whole[:2]
    assert KEYRING.decrypt(**WHERE, blob=blob) == plaintext
    with pytest.raises(DecryptionError):
        KEYRING.decrypt(**{**WHERE, "kind": "response"}, blob=blob)
    with pytest.raises(DecryptionError):
        KEYRING.decrypt(**WHERE, blob=blob[:-1] + bytes([blob[-1] ^ 1]))
