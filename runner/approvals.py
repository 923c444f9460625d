"""Approval tokens, notifications and decisions (DESIGN §4).

A token is ``HMAC-SHA256(secret[token_id], approval_id)``, URL-safe base64
without padding. Nothing about it is stored: ``tick()`` can re-send a
notification by computing it again, and ``token_id`` names the key, so keys can
rotate (sign with the first, accept all listed).
"""

from __future__ import annotations

import asyncio
import base64
import hashlib
import hmac
import inspect
import logging
import secrets
from collections.abc import Callable, Mapping
from datetime import timedelta
from typing import Any

from runner.agent import Agent, ApprovalRequest
from runner.errors import ApprovalError, InvalidInput
from runner.history import approval_response
from store.base import Store
from store.models import Approval, Decision

log = logging.getLogger(__name__)

MAX_REASON_CHARS = 2000


class Tokens:
    """Signing keys by id; the first one signs new approvals."""

    def __init__(self, keys: Mapping[str, bytes], current_id: str) -> None:
        if current_id not in keys:
            raise InvalidInput(f"no signing key with id {current_id!r}")
        self._keys = dict(keys)
        self.current_id = current_id

    @classmethod
    def parse(cls, setting: str | None) -> Tokens:
        """``RUNWRIGHT_SECRET_KEY``: ``id=secret[,id=secret...]``, first one current;
        a bare secret gets the id ``default``. Unset: a random key for this
        process only (tokens then verify only here)."""
        if not setting:
            log.info("RUNWRIGHT_SECRET_KEY is not set: approval tokens verify in this process only")
            return cls({"ephemeral": secrets.token_bytes(32)}, "ephemeral")
        keys: dict[str, bytes] = {}
        order: list[str] = []
        for item in filter(None, (part.strip() for part in setting.split(","))):
            key_id, sep, secret = item.partition("=")
            if not sep:
                key_id, secret = "default", item
            if not key_id or not secret:
                raise InvalidInput("RUNWRIGHT_SECRET_KEY entries look like id=secret")
            keys[key_id] = secret.encode()
            order.append(key_id)
        return cls(keys, order[0])

    def sign(self, approval_id: str, token_id: str | None = None) -> str:
        key_id = token_id or self.current_id
        try:
            secret = self._keys[key_id]
        except KeyError:
            raise ApprovalError(f"signing key {key_id!r} is no longer configured") from None
        digest = hmac.new(secret, approval_id.encode(), hashlib.sha256).digest()
        return base64.urlsafe_b64encode(digest).rstrip(b"=").decode()

    def verify(self, approval_id: str, token_id: str, token: str) -> bool:
        if token_id not in self._keys:
            return False
        return hmac.compare_digest(self.sign(approval_id, token_id), token)


def backoff(attempts: int, base: float, cap: float) -> timedelta:
    """Delay before the next notification after ``attempts`` tries."""
    return timedelta(seconds=min(cap, base * 2 ** max(0, attempts - 1)))


def request_for(agent: Agent, run_id: str, approval: Approval, tokens: Tokens) -> ApprovalRequest:
    return ApprovalRequest(
        run_id=run_id,
        agent=agent.name,
        approval_id=approval.approval_id,
        tool_name=approval.tool_name,
        input=approval.input,
        expires_at=approval.expires_at,
        token=tokens.sign(approval.approval_id, approval.token_id),
        token_id=approval.token_id,
    )


async def deliver(
    notifier: Callable[[ApprovalRequest], Any], request: ApprovalRequest, executor: Any
) -> None:
    """Call a notifier, sync (in a thread) or async. Raising means "not accepted"."""
    result = await asyncio.get_running_loop().run_in_executor(executor, notifier, request)
    if inspect.isawaitable(result):
        await result


def decide(
    store: Store,
    tokens: Tokens,
    approval_id: str,
    approve: bool,
    reason: str | None,
    *,
    token: str | None,
    trusted: bool,
) -> Any:
    """Check the token and record the decision; the store checks the rest
    (decided once, not expired, run still waiting) in one transaction."""
    if reason is not None and len(reason) > MAX_REASON_CHARS:
        raise ApprovalError(f"the reason is longer than {MAX_REASON_CHARS} characters")
    approval = store.get_approval(approval_id)
    if not trusted:
        if not token:
            raise ApprovalError("a token is required to decide an approval")
        if not tokens.verify(approval.approval_id, approval.token_id, token):
            raise ApprovalError(f"the token is not valid for approval {approval_id}")
    response = approval_response(approval.approval_id, approval.tool_call_id, approve, reason)
    decision = Decision.APPROVED if approve else Decision.DENIED
    return store.decide(approval.approval_id, decision, reason, response)
