"""Built-in notifiers.

The webhook notifier POSTs the approval request as JSON and signs it::

    X-Runwright-Timestamp: <unix seconds>
    X-Runwright-Signature: sha256=<hex HMAC-SHA256(secret, "<timestamp>." + body)>

A receiver recomputes the HMAC over the raw body with the shared secret,
compares in constant time, and refuses timestamps older than a few minutes
(:func:`verify_signature` does all three).

The body (:func:`request_body`) says what the person is asked: ``type`` is
``approval.requested`` (approve or deny ``tool_name`` with ``input``; an edit
must fit ``schema``) or ``input.requested`` (answer ``question``; the answer
must fit ``schema``); ``kind`` is ``approval`` or ``input`` to match.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import time
import urllib.error
import urllib.request
from collections.abc import Mapping
from datetime import UTC, datetime
from typing import Any

from runner.core.agent import ApprovalRequest
from runner.core.errors import ConfigurationError, NotifierGone, RunwrightError
from runner.webhooks.receiver import SECRET_PREFIX, check_secret

SIGNATURE_HEADER = "X-Runwright-Signature"
TIMESTAMP_HEADER = "X-Runwright-Timestamp"


class NotificationError(RunwrightError):
    """The notification was not accepted."""


class _NoRedirects(urllib.request.HTTPRedirectHandler):
    """A redirect is not followed: urllib's would send a 301, 302 or 303 on as
    a GET without the body (whose 2xx would then read as delivered), and the
    notifier's own headers (an Authorization, the signature) to whatever
    host the answer names. Returning None leaves the 3xx to be raised as the
    HTTP error it is here: a failed delivery, which tick() re-sends."""

    def redirect_request(self, *args: Any, **kwargs: Any) -> None:
        return None


_OPENER = urllib.request.build_opener(_NoRedirects)


def sign(secret: str | bytes, timestamp: str, body: bytes) -> str:
    key = secret.encode() if isinstance(secret, str) else secret
    return hmac.new(key, timestamp.encode() + b"." + body, hashlib.sha256).hexdigest()


def verify_signature(
    secret: str | bytes,
    body: bytes,
    timestamp: str | None,
    signature: str | None,
    *,
    tolerance_seconds: float = 300,
    now: float | None = None,
) -> bool:
    """True if ``signature`` (``sha256=<hex>``) signs ``body`` at ``timestamp``.

    The headers come from anyone who can reach the receiver: a missing header
    (None), a non-ASCII or absurd value is simply not a valid signature.
    """
    if not isinstance(timestamp, str) or not isinstance(signature, str):
        return False
    # int() alone would also take " 12", "1_2" and non-ASCII digits.
    if not (timestamp.isascii() and timestamp.isdigit() and len(timestamp) <= 20):
        return False
    if abs((time.time() if now is None else now) - int(timestamp)) > tolerance_seconds:
        return False
    expected = ("sha256=" + sign(secret, timestamp, body)).encode()
    # Bytes, not str: compare_digest raises TypeError on a non-ASCII str.
    return hmac.compare_digest(expected, signature.encode("utf-8", "surrogatepass"))


def request_body(request: ApprovalRequest) -> dict[str, Any]:
    """The JSON a webhook receives; fields are only ever added, since
    receivers parse it. ``question`` is null for an approval."""
    return {
        "type": "input.requested" if request.kind == "input" else "approval.requested",
        "kind": request.kind,
        "run_id": request.run_id,
        "agent": request.agent,
        "approval_id": request.approval_id,
        "tool_name": request.tool_name,
        "input": request.input,
        "question": request.question,
        "schema": request.schema,
        "expires_at": request.expires_at.isoformat()
        if hasattr(request.expires_at, "isoformat")
        else request.expires_at,
        "token": request.token,
        "token_id": request.token_id,
    }


class WebhookNotifier:
    """``notifier=WebhookNotifier(url, secret)`` on an agent: a 2xx answer means
    accepted; anything else (or no answer) means ``tick()`` re-sends later.

    A ``whsec_`` secret (``runwright webhook secret``) signs each request as a
    Standard Webhooks delivery, with the ``standardwebhooks`` package
    (``webhook-id``: the request's id, the same on every re-send;
    ``webhook-timestamp``; ``webhook-signature``), so the receiver verifies it
    with any Standard Webhooks library; another secret signs it with
    ``X-Runwright-Signature`` (:func:`verify_signature`), as before. An endpoint
    that answers 410 Gone is disabled: that request is not re-sent, and this
    notifier sends it nothing more (:class:`~runner.core.errors.NotifierGone`). A
    redirect (3xx) is never followed: it is a failed delivery, re-sent later."""

    def __init__(
        self,
        url: str,
        secret: str | bytes,
        *,
        timeout: float = 10.0,
        headers: Mapping[str, str] | None = None,
    ) -> None:
        if not url.startswith(("http://", "https://")):
            raise ConfigurationError(f"webhook URL must be http(s), not {url!r}")
        self.url = url
        self.secret = secret
        self.timeout = timeout
        self.headers = dict(headers or {})
        self._standard = None
        if isinstance(secret, str) and secret.startswith(SECRET_PREFIX):
            from standardwebhooks import Webhook

            self._standard = Webhook(check_secret(secret, f"the webhook notifier of {url}"))
        # Set once the endpoint answers 410: it wants nothing more.
        self.gone = False

    def __call__(self, request: ApprovalRequest) -> None:
        if self.gone:
            raise NotifierGone(f"webhook {self.url} answered 410 Gone before: it is disabled")
        body = json.dumps(request_body(request), separators=(",", ":"), default=str).encode()
        http_request = urllib.request.Request(
            self.url,
            data=body,
            method="POST",
            headers={
                **self.headers,
                "Content-Type": "application/json",
                "User-Agent": "runwright-webhook",
                **self._signed(request.approval_id, body),
            },
        )
        try:
            with _OPENER.open(http_request, timeout=self.timeout) as response:
                status = response.status
        except urllib.error.HTTPError as exc:
            exc.close()  # the answer holds the connection's socket
            if exc.code == 410:
                self.gone = True
                raise NotifierGone(f"webhook {self.url} answered 410 Gone: disabled") from exc
            if 300 <= exc.code < 400:
                location = (exc.headers.get("Location") or "")[:200] if exc.headers else ""
                raise NotificationError(
                    f"webhook answered {exc.code}, a redirect to {location!r}, which is not "
                    "followed: give the notifier the URL that accepts the POST"
                ) from exc
            raise NotificationError(f"webhook answered {exc.code}") from exc
        except (urllib.error.URLError, TimeoutError, OSError) as exc:
            raise NotificationError(f"webhook unreachable: {exc}") from exc
        if not 200 <= status < 300:
            raise NotificationError(f"webhook answered {status}")

    def _signed(self, message_id: str, body: bytes) -> dict[str, str]:
        """The signature headers: Standard Webhooks' for a ``whsec_`` secret."""
        now = datetime.now(UTC)
        if self._standard is None:
            timestamp = str(int(now.timestamp()))
            return {
                TIMESTAMP_HEADER: timestamp,
                SIGNATURE_HEADER: "sha256=" + sign(self.secret, timestamp, body),
            }
        return {
            "webhook-id": message_id,
            "webhook-timestamp": str(int(now.timestamp())),
            "webhook-signature": self._standard.sign(message_id, now, body.decode()),
        }
