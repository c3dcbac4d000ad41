"""Keys and payload encryption at rest.

A master key (from configuration, never generated behind the operator's back) derives
every other key with HKDF-SHA256: a per-tenant data key for stored payloads and, unless
the ledger's idempotency root is given, a per-tenant HMAC key for downstream idempotency
keys. Deriving instead of storing means there is one secret to manage, and a leak of one
tenant's derived key exposes nothing else.

A keyring may hold several master keys while one is rotated out: the first encrypts, any
of them decrypts the blobs that name it. The downstream HMAC key must not follow the
encrypting key, or a rotation would change the key sent for new effects of a tenant; so
runtimes derive it from the idempotency root, a random secret the ledger keeps sealed
under the master keys (``engine.rekey``), which rotations re-seal but never change.

Stored payloads are AES-256-GCM encrypted and bound to (tenant, effect, kind) through the
associated data, so a ciphertext copied onto another row fails to decrypt instead of
silently replaying someone else's request. Every blob names the key that wrote it, so a
wrong master key is reported as such, not as corruption. No I/O apart from os.urandom.
"""

from __future__ import annotations

import base64
import binascii
import os
from collections.abc import Sequence
from dataclasses import dataclass, field

from cryptography.exceptions import InvalidTag
from cryptography.hazmat.primitives import hashes
from cryptography.hazmat.primitives.ciphers import Cipher, algorithms, modes
from cryptography.hazmat.primitives.ciphers.aead import AESGCM
from cryptography.hazmat.primitives.kdf.hkdf import HKDF

from effect_broker.errors import DecryptionError, MasterKeyError

__all__ = ["BLOB_VERSION", "Keyring", "MasterKey", "blob_key_id"]

KEY_BYTES = 32
NONCE_BYTES = 12
_TAG_BYTES = 16
#: Up to this many bytes of parts, ``encrypt_parts`` joins them and seals them whole.
JOIN_PARTS_UP_TO = 64 * 1024
BLOB_VERSION = 1
_KEY_ID_PREFIX = "k1-"
_MAKE_KEY = (
    'python -c "import os,base64;print(base64.b64encode(os.urandom(32)).decode())"'
)


def _hkdf(master: bytes, info: bytes, length: int = KEY_BYTES) -> bytes:
    return HKDF(algorithm=hashes.SHA256(), length=length, salt=None, info=info).derive(
        master
    )


def _length_prefixed(*fields: bytes) -> bytes:
    """Join fields so that no two different tuples give the same bytes."""
    return b"".join(len(f).to_bytes(4, "big") + f for f in fields)


@dataclass(frozen=True)
class MasterKey:
    """The 32-byte root secret. Its repr shows only the public ``key_id``."""

    raw: bytes = field(repr=False)
    key_id: str = field(init=False, compare=False)

    def __post_init__(self) -> None:
        if len(self.raw) != KEY_BYTES:
            raise MasterKeyError(
                f"a master key must be exactly {KEY_BYTES} bytes, got {len(self.raw)}"
            )
        # A PRF output of the key: safe to log and store, reveals nothing about the key.
        digest = _hkdf(self.raw, b"effect-broker key-id v1", length=8)
        object.__setattr__(self, "key_id", _KEY_ID_PREFIX + digest.hex())

    @classmethod
    def from_base64(
        cls, value: str | None, *, source: str = "EFFECT_BROKER_MASTER_KEY"
    ) -> MasterKey:
        """Decode standard or URL-safe base64 (padding optional) into a 32-byte key.

        Every refusal names ``source`` and how to make a key; none echoes the value.
        """
        how = f"Create one with: {_MAKE_KEY} and keep it: payloads stored under a key "
        how += "cannot be read without it."
        text = (value or "").strip()
        if not text:
            raise MasterKeyError(f"{source} is not set. {how}")
        text = text.replace("-", "+").replace("_", "/")
        try:
            raw = base64.b64decode(text + "=" * (-len(text) % 4), validate=True)
        except (binascii.Error, ValueError):
            raise MasterKeyError(f"{source} is not valid base64. {how}") from None
        if len(raw) != KEY_BYTES:
            raise MasterKeyError(
                f"{source} decodes to {len(raw)} bytes; it must be exactly {KEY_BYTES}. "
                + how
            )
        return cls(raw)

    @classmethod
    def generate(cls) -> MasterKey:
        """A fresh random key; only for explicit set-up paths such as ``up``."""
        return cls(os.urandom(KEY_BYTES))

    def to_base64(self) -> str:
        return base64.b64encode(self.raw).decode("ascii")

    @classmethod
    def list_from_base64(
        cls, value: str, *, source: str = "EFFECT_BROKER_MASTER_KEYS"
    ) -> list[MasterKey]:
        """Comma-separated keys, the encrypting one first; no blanks, no repeats."""
        items = value.split(",")
        if not value.strip():
            raise MasterKeyError(f"{source} is empty; list at least one key")
        keys: list[MasterKey] = []
        for number, item in enumerate(items, start=1):
            if not item.strip():
                raise MasterKeyError(
                    f"{source}: key {number} of {len(items)} is empty; separate "
                    "base64 keys with single commas"
                )
            key = cls.from_base64(item, source=f"{source} (key {number})")
            for earlier, seen in enumerate(keys, start=1):
                if seen.key_id == key.key_id:
                    raise MasterKeyError(
                        f"{source}: keys {earlier} and {number} are the same key "
                        f"({key.key_id}); list each key once"
                    )
            keys.append(key)
        return keys


def blob_key_id(blob: bytes) -> str | None:
    """The key id a sealed blob names in its header, or None when it has none."""
    if len(blob) < 2 or blob[0] != BLOB_VERSION or len(blob) < 2 + blob[1]:
        return None
    return blob[2 : 2 + blob[1]].decode("ascii", "replace")


class Keyring:
    """Per-tenant keys derived from master keys, and payload encryption with them.

    ``masters`` is one key or several: the first encrypts, each decrypts what names it.
    ``hmac_root`` (32 bytes) replaces the first master key as the source of the tenant
    HMAC keys, so that they survive a rotation of the master keys.
    """

    def __init__(
        self, masters: MasterKey | Sequence[MasterKey], *, hmac_root: bytes | None = None
    ) -> None:
        keys = [masters] if isinstance(masters, MasterKey) else list(masters)
        if not keys:
            raise MasterKeyError("a keyring needs at least one master key")
        self._masters = {key.key_id: key for key in keys}
        if len(self._masters) != len(keys):
            raise MasterKeyError("a keyring cannot hold the same master key twice")
        self._master = keys[0]
        if hmac_root is not None and len(hmac_root) != KEY_BYTES:
            raise MasterKeyError(f"the idempotency root must be {KEY_BYTES} bytes")
        self._hmac_root = hmac_root
        self._cache: dict[tuple[bytes, str, str], bytes] = {}
        # An AESGCM object is reusable and costs a key schedule to build: as many as
        # derived keys (one per tenant and master key), built on first use.
        self._ciphers: dict[tuple[str, str], AESGCM] = {}
        key_id = self._master.key_id.encode("ascii")
        self._encrypt_header = bytes([BLOB_VERSION, len(key_id)]) + key_id

    def __repr__(self) -> str:
        return f"Keyring(key_ids={self.key_ids!r})"

    @property
    def key_id(self) -> str:
        """The id of the key that encrypts."""
        return self._master.key_id

    @property
    def key_ids(self) -> tuple[str, ...]:
        """Every key this keyring decrypts with, the encrypting one first."""
        return tuple(self._masters)

    def with_hmac_root(self, hmac_root: bytes) -> Keyring:
        return Keyring(list(self._masters.values()), hmac_root=hmac_root)

    def _derive(
        self, purpose: bytes, tenant_id: str, root: bytes, root_name: str
    ) -> bytes:
        # Derivation is cheap but not free; requests for one tenant reuse the result.
        cache_key = (purpose, tenant_id, root_name)
        key = self._cache.get(cache_key)
        if key is None:
            info = b"effect-broker v1" + _length_prefixed(purpose, tenant_id.encode())
            key = self._cache[cache_key] = _hkdf(root, info)
        return key

    def tenant_hmac_key(self, tenant_id: str) -> bytes:
        """Key for ``canonical.downstream_key``: from the idempotency root when set."""
        if self._hmac_root is not None:
            return self._derive(b"tenant-hmac", tenant_id, self._hmac_root, "root")
        return self._derive(b"tenant-hmac", tenant_id, self._master.raw, self.key_id)

    def data_key(self, tenant_id: str, key_id: str | None = None) -> bytes:
        """AES-256 key for the tenant's stored payloads under one master key."""
        master = self._masters[key_id] if key_id else self._master
        return self._derive(b"data", tenant_id, master.raw, master.key_id)

    def _cipher(self, tenant_id: str, key_id: str | None = None) -> AESGCM:
        """AES-GCM under ``data_key(tenant_id, key_id)``, built once per pair."""
        cache_key = (tenant_id, key_id or self._master.key_id)
        cipher = self._ciphers.get(cache_key)
        if cipher is None:
            cipher = self._ciphers[cache_key] = AESGCM(self.data_key(tenant_id, key_id))
        return cipher

    @staticmethod
    def _aad(header: bytes, tenant_id: str, effect_id: str, kind: str) -> bytes:
        return header + _length_prefixed(
            tenant_id.encode(), effect_id.encode(), kind.encode()
        )

    def encrypt(
        self, *, tenant_id: str, effect_id: str, kind: str, plaintext: bytes
    ) -> bytes:
        """Encrypt a payload for one effect; ``kind`` is ``"request"`` or ``"response"``.

        Blob: version byte, key id length byte, key id, 12-byte nonce, ciphertext + tag.
        The nonce is random: per-tenant keys keep each key far below GCM's limits.
        """
        header = self._encrypt_header
        nonce = os.urandom(NONCE_BYTES)
        sealed = self._cipher(tenant_id).encrypt(
            nonce, plaintext, self._aad(header, tenant_id, effect_id, kind)
        )
        return header + nonce + sealed

    def encrypt_parts(
        self, *, tenant_id: str, effect_id: str, kind: str, parts: Sequence[bytes]
    ) -> bytes:
        """``encrypt`` of the parts one after another: the same blob, which ``decrypt``
        opens, without joining the parts first.

        A receipt is its packed head followed by its body, and the body may be
        megabytes: joined first, and then the ciphertext and the blob built from it,
        sealing held four copies of the body at once. Here it holds three (the body,
        its ciphertext, the blob), one fewer for every stream settling at that moment.
        Parts that are small together are joined and sealed by ``encrypt``: the cached
        AES-GCM object costs a fifth of a new cipher context per call (10 against 2 µs
        for a small receipt), and the copies do not matter at that size.
        """
        if sum(map(len, parts)) <= JOIN_PARTS_UP_TO:
            return self.encrypt(
                tenant_id=tenant_id,
                effect_id=effect_id,
                kind=kind,
                plaintext=b"".join(parts),
            )
        header = self._encrypt_header
        nonce = os.urandom(NONCE_BYTES)
        encryptor = Cipher(
            algorithms.AES(self.data_key(tenant_id)), modes.GCM(nonce)
        ).encryptor()
        encryptor.authenticate_additional_data(
            self._aad(header, tenant_id, effect_id, kind)
        )
        sealed = [encryptor.update(part) for part in parts]
        encryptor.finalize()
        return b"".join([header, nonce, *sealed, encryptor.tag])

    def decrypt(self, *, tenant_id: str, effect_id: str, kind: str, blob: bytes) -> bytes:
        """Reverse ``encrypt``; refuse blobs from another key, row or kind, or altered."""
        what = f"the stored {kind} payload of effect {effect_id!r}"
        if not blob:
            raise DecryptionError(f"{what} is malformed: it is empty")
        if blob[0] != BLOB_VERSION:
            raise DecryptionError(
                f"{what} is malformed: unknown format version {blob[0]}"
            )
        id_end = 2 + (blob[1] if len(blob) > 1 else 0)
        if len(blob) < id_end + NONCE_BYTES + _TAG_BYTES:
            raise DecryptionError(f"{what} is malformed: too short")
        key_id = blob[2:id_end].decode("ascii", "replace")
        if key_id not in self._masters:
            configured = ", ".join(self._masters)
            noun = "master key is" if len(self._masters) == 1 else "master keys are"
            raise DecryptionError(
                f"{what} was encrypted under key {key_id}, but the configured {noun} "
                f"{configured}; configure the master key that wrote it"
            )
        header = blob[:id_end]
        nonce = blob[id_end : id_end + NONCE_BYTES]
        sealed = blob[id_end + NONCE_BYTES :]
        try:
            return self._cipher(tenant_id, key_id).decrypt(
                nonce, sealed, self._aad(header, tenant_id, effect_id, kind)
            )
        except InvalidTag:
            raise DecryptionError(
                f"{what} failed authentication: it was altered, or it belongs to another "
                "effect, tenant or kind"
            ) from None

    def reseal(self, *, tenant_id: str, effect_id: str, kind: str, blob: bytes) -> bytes:
        """The same plaintext sealed under the encrypting key, proven before it is used.

        Decrypts with whichever key wrote ``blob``, encrypts under the first key, and
        decrypts the result again: only a blob that opens to the very same bytes is
        returned, so a rotation can never store something other than what it read.
        """
        plaintext = self.decrypt(
            tenant_id=tenant_id, effect_id=effect_id, kind=kind, blob=blob
        )
        fresh = self.encrypt(
            tenant_id=tenant_id, effect_id=effect_id, kind=kind, plaintext=plaintext
        )
        again = self.decrypt(
            tenant_id=tenant_id, effect_id=effect_id, kind=kind, blob=fresh
        )
        if again != plaintext or blob_key_id(fresh) != self.key_id:
            raise DecryptionError(f"re-encrypting the {kind} of {effect_id!r} failed")
        return fresh
