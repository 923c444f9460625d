"""Approval tokens: what makes an approval link a key to one approval.

A token is ``HMAC-SHA256(secret[token_id], approval_id)``, URL-safe base64
without padding. Nothing about it is stored: ``tick()`` can re-send a
notification by computing it again, and ``token_id`` names the key, so keys can
rotate (sign with the first, accept all listed).
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import logging
import re
import secrets
from collections.abc import Mapping

from runner.core.errors import ConfigurationError, InvalidApprovalToken

log = logging.getLogger(__name__)

MIN_SECRET_BYTES = 32
DEFAULT_KEY_ID = "default"
# ":" and "," appear in no base64, URL-safe base64 or hex alphabet, so a secret
# in any of those encodings can never be mistaken for an id or a second key.
_KEY_ID = re.compile(r"[A-Za-z0-9_.-]{1,64}")
_SEPARATOR = ":"
_B64_PADDING = re.compile(r"[^=]*=*")


class Tokens:
    """Signing keys by id; the first one signs new approvals."""

    def __init__(self, keys: Mapping[str, bytes], current_id: str) -> None:
        if current_id not in keys:
            raise ConfigurationError(f"no signing key with id {current_id!r}")
        self._keys = dict(keys)
        self.current_id = current_id

    @classmethod
    def parse(cls, setting: str | None) -> Tokens:
        """``RUNWRIGHT_SECRET_KEY``: ``secret`` or ``id:secret[,id:secret...]``.

        The first key signs new approvals; every listed key verifies. A bare
        secret (no ``:``) is taken whole and gets the id ``default``; with an id,
        the secret is everything after the first ``:``. Each secret must be at
        least 32 bytes. Unset: a random key for this process only (tokens then
        verify only here).
        """
        if not setting:
            log.info("RUNWRIGHT_SECRET_KEY is not set: approval tokens verify in this process only")
            return cls({"ephemeral": secrets.token_bytes(32)}, "ephemeral")
        keys: dict[str, bytes] = {}
        for number, entry in enumerate(setting.split(","), start=1):
            key_id, secret = _parse_entry(number, entry.strip())
            if key_id in keys:
                raise ConfigurationError(f"RUNWRIGHT_SECRET_KEY lists the key id {key_id!r} twice")
            keys[key_id] = secret
        return cls(keys, next(iter(keys)))

    def sign(self, approval_id: str, token_id: str | None = None) -> str:
        key_id = token_id or self.current_id
        try:
            secret = self._keys[key_id]
        except KeyError:
            raise InvalidApprovalToken(f"signing key {key_id!r} is no longer configured") from None
        digest = hmac.new(secret, approval_id.encode(), hashlib.sha256).digest()
        return base64.urlsafe_b64encode(digest).rstrip(b"=").decode()

    def verify(self, approval_id: str, token_id: str, token: object) -> bool:
        if token_id not in self._keys or not isinstance(token, str):
            return False
        expected = self.sign(approval_id, token_id).encode()
        # Bytes, not str: compare_digest raises TypeError on a non-ASCII str, and
        # a token comes from whoever holds (or guesses at) a link.
        return hmac.compare_digest(expected, token.encode("utf-8", "surrogatepass"))


def _parse_entry(number: int, entry: str) -> tuple[str, bytes]:
    """One ``secret`` or ``id:secret`` entry of ``RUNWRIGHT_SECRET_KEY``. Errors
    name the entry by its position: its text may be (part of) a secret."""
    if not entry:
        raise ConfigurationError(
            f"RUNWRIGHT_SECRET_KEY entry {number} is empty; give a secret or "
            "id:secret[,id:secret...]"
        )
    key_id, sep, secret = (part.strip() for part in entry.partition(_SEPARATOR))
    if not sep:
        key_id, secret = DEFAULT_KEY_ID, entry
        if not _B64_PADDING.fullmatch(entry):
            # "=" other than base64's trailing padding is the old id=secret form;
            # taking it whole would silently rename the key and void its tokens.
            raise ConfigurationError(
                f"RUNWRIGHT_SECRET_KEY entry {number}: entries are id:secret (a colon, "
                "not '='), or a bare secret"
            )
    elif not _KEY_ID.fullmatch(key_id):
        raise ConfigurationError(
            f"RUNWRIGHT_SECRET_KEY entry {number}: a key id is 1-64 letters, digits, "
            "'_', '.' or '-' before the first ':'"
        )
    try:
        encoded = secret.encode()
    except UnicodeEncodeError:
        raise ConfigurationError(
            f"RUNWRIGHT_SECRET_KEY entry {number}: the secret is not valid UTF-8"
        ) from None
    if len(encoded) < MIN_SECRET_BYTES:
        raise ConfigurationError(
            f"RUNWRIGHT_SECRET_KEY entry {number}: the secret is {len(encoded)} bytes; at "
            f"least {MIN_SECRET_BYTES} are required (e.g. openssl rand -base64 32)"
        )
    return key_id, encoded
