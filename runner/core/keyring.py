"""The key ring of encryption at rest (docs/security.md): named keys, the
first of which encrypts and all of which decrypt, and one value sealed or
opened with AES-256-GCM from the ``cryptography`` library (never a cipher of
our own).

A sealed value reads ``rw1:<key id>:<base64 of nonce and ciphertext>``: the
key id is in clear, so that a value names the key it needs and ``runwright
keys status`` can count the rows each key protects. The associated data
(:func:`binding`) names the table, the column and the row a value belongs
to: a ciphertext copied to another row or column does not open.

``RUNWRIGHT_ENCRYPTION_KEYS`` holds the ring: ``id:base64-key`` pairs,
comma-separated, each key 32 random bytes (:func:`new_key`). The first
encrypts. A wrong or missing key is one clear error that names the key id,
never the key, and never garbage.

This module is the cipher and the ring; ``store/sealing.py`` says which
columns the store seals with it, and how a value is bound to its row.
"""

from __future__ import annotations

import base64
import binascii
import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from runner.core.errors import ConfigurationError
from store.sealing import KEY_ID, PREFIX, CannotDecrypt, binding, key_of

__all__ = ["CannotDecrypt", "KeyRing", "binding", "key_of", "new_key"]

KEY_BYTES = 32
NONCE_BYTES = 12


def new_key() -> str:
    """A fresh key, as ``RUNWRIGHT_ENCRYPTION_KEYS`` takes it (base64 of 32 random bytes)."""
    return base64.b64encode(os.urandom(KEY_BYTES)).decode()


def _aead(key: bytes) -> Any:
    try:
        from cryptography.hazmat.primitives.ciphers.aead import AESGCM
    except ImportError as exc:  # pragma: no cover - the extra is missing
        raise ConfigurationError(
            "encryption at rest needs the 'encryption' extra: pip install 'runwright[encryption]'"
        ) from exc
    return AESGCM(key)


@dataclass(frozen=True)
class KeyRing:
    """Named keys, in order: the first seals, any of them opens."""

    keys: Mapping[str, bytes]
    order: tuple[str, ...]
    _ciphers: dict[str, Any] = field(default_factory=dict, compare=False, repr=False)

    @classmethod
    def parse(cls, text: str) -> KeyRing:
        """The ring ``RUNWRIGHT_ENCRYPTION_KEYS`` gives; one clear error for a
        malformed one, naming the key id at fault (never a key)."""
        keys: dict[str, bytes] = {}
        order: list[str] = []
        for number, item in enumerate(text.split(","), start=1):
            item = item.strip()
            key_id, colon, encoded = item.partition(":")
            if not colon or not KEY_ID.fullmatch(key_id):
                raise ConfigurationError(
                    f"RUNWRIGHT_ENCRYPTION_KEYS: entry {number} is not id:base64-key with an id "
                    "of letters, digits, '_' or '-' (at most 32)"
                )
            if key_id in keys:
                raise ConfigurationError(
                    f"RUNWRIGHT_ENCRYPTION_KEYS: key {key_id!r} is given twice"
                )
            try:
                key = base64.b64decode(encoded, validate=True)
            except (binascii.Error, ValueError):
                raise ConfigurationError(
                    f"RUNWRIGHT_ENCRYPTION_KEYS: key {key_id!r} is not base64"
                ) from None
            if len(key) != KEY_BYTES:
                raise ConfigurationError(
                    f"RUNWRIGHT_ENCRYPTION_KEYS: key {key_id!r} is {len(key)} bytes, not "
                    f"{KEY_BYTES} (make one with runner.core.keyring.new_key())"
                )
            keys[key_id] = key
            order.append(key_id)
        return cls(keys, tuple(order))

    def __repr__(self) -> str:  # never the keys
        return f"KeyRing({', '.join(self.order)})"

    @property
    def current(self) -> str:
        """The id of the key that seals."""
        return self.order[0]

    def ready(self) -> KeyRing:
        """The ring with each key's cipher made: a missing ``encryption``
        extra is one :class:`ConfigurationError` when a process starts, not
        at its first write."""
        for key_id in self.order:
            self._cipher(key_id)
        return self

    def _cipher(self, key_id: str) -> Any:
        found = self._ciphers.get(key_id)
        if found is None:
            found = self._ciphers[key_id] = _aead(self.keys[key_id])
        return found

    def seal(self, plaintext: bytes, associated: bytes) -> str:
        """``plaintext`` sealed under the current key, bound to ``associated``."""
        nonce = os.urandom(NONCE_BYTES)
        sealed = self._cipher(self.current).encrypt(nonce, plaintext, associated)
        return f"{PREFIX}:{self.current}:{base64.b64encode(nonce + sealed).decode()}"

    def open(self, value: str, associated: bytes) -> bytes:
        """The plaintext of a sealed ``value`` bound to ``associated``; raises
        :class:`CannotDecrypt`, naming the key id, when it does not open."""
        key_id = key_of(value)
        if key_id is None:
            raise CannotDecrypt("the value is not one Runwright sealed")
        if key_id not in self.keys:
            raise CannotDecrypt(
                f"the value is sealed under key {key_id!r}, which RUNWRIGHT_ENCRYPTION_KEYS "
                f"does not hold (it holds {', '.join(self.order)})"
            )
        try:
            raw = base64.b64decode(value.split(":", 2)[2], validate=True)
        except (binascii.Error, ValueError):
            raise CannotDecrypt(f"the value sealed under key {key_id!r} is not base64") from None
        from cryptography.exceptions import InvalidTag

        try:
            return bytes(
                self._cipher(key_id).decrypt(raw[:NONCE_BYTES], raw[NONCE_BYTES:], associated)
            )
        except InvalidTag:
            raise CannotDecrypt(
                f"the value sealed under key {key_id!r} does not open: it was altered, or it "
                "belongs to another row or column"
            ) from None

    def reseal(self, value: str, associated: bytes) -> str:
        """``value`` sealed under the current key (as it is, if it already is)."""
        if key_of(value) == self.current:
            return value
        return self.seal(self.open(value, associated), associated)
