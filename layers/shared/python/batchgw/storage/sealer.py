"""Secrets at rest: encrypted with a KMS key (the stack's own on AWS, moto's locally), bound
to their owner by the encryption context, so a sealed secret copied to another user's
record does not open."""

from __future__ import annotations

from typing import Any

from botocore.exceptions import BotoCoreError, ClientError

from batchgw.domain.errors import StorageError


class KmsSealer:
    """``clients`` gives the KMS client on first use (``clients.kms``): no cold start pays
    for a client it does not use."""

    def __init__(self, clients: Any, key_id: str) -> None:
        self._clients = clients
        self._key_id = key_id

    def seal(self, plaintext: str, *, user_id: str) -> bytes:
        try:
            answer = self._clients.kms.encrypt(
                KeyId=self._key_id, Plaintext=plaintext.encode(), EncryptionContext={"user": user_id}
            )
        except (ClientError, BotoCoreError) as exc:
            raise StorageError(f"could not encrypt a secret: {exc}") from exc
        return bytes(answer["CiphertextBlob"])

    def open(self, sealed: bytes, *, user_id: str) -> str:
        try:
            answer = self._clients.kms.decrypt(
                KeyId=self._key_id, CiphertextBlob=sealed, EncryptionContext={"user": user_id}
            )
        except (ClientError, BotoCoreError) as exc:
            raise StorageError(f"could not decrypt a secret: {exc}") from exc
        return bytes(answer["Plaintext"]).decode()
