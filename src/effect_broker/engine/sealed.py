"""Stored requests and receipts, sealed for one tenant and one effect.

The associated data binds each blob to its tenant, its effect and its kind, so a blob
copied to another row, or a request read as a receipt, fails to open.
"""

from __future__ import annotations

from uuid import UUID

from effect_broker.crypto import Keyring
from effect_broker.engine.messages import (
    StoredRequest,
    StoredResponse,
    decode_request,
    decode_response,
    encode_request,
    encoded_response_parts,
)
from effect_broker.errors import DecryptionError
from effect_broker.models import Effect, Receipt


def seal_request(
    keyring: Keyring, tenant: str, effect_id: UUID, request: StoredRequest
) -> bytes:
    return keyring.encrypt(
        tenant_id=tenant,
        effect_id=str(effect_id),
        kind="request",
        plaintext=encode_request(request),
    )


def seal_response(keyring: Keyring, effect: Effect, response: StoredResponse) -> bytes:
    return keyring.encrypt_parts(
        tenant_id=effect.tenant_id,
        effect_id=str(effect.effect_id),
        kind="response",
        parts=encoded_response_parts(response),
    )


def open_request(keyring: Keyring, effect: Effect) -> StoredRequest:
    """The request as the client sent it, for a resend or a lookup."""
    if effect.request_ciphertext is None:
        raise DecryptionError(f"effect {effect.effect_id} has no stored request")
    return decode_request(
        keyring.decrypt(
            tenant_id=effect.tenant_id,
            effect_id=str(effect.effect_id),
            kind="request",
            blob=effect.request_ciphertext,
        )
    )


def open_receipt(keyring: Keyring, receipt: Receipt, effect: Effect) -> StoredResponse:
    return decode_response(
        keyring.decrypt(
            tenant_id=effect.tenant_id,
            effect_id=str(effect.effect_id),
            kind="response",
            blob=receipt.response_ciphertext,
        )
    )
