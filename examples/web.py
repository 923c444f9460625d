"""What both example apps do with a request before Runwright sees it.

Flask and Django decode request bodies leniently: bytes that are not UTF-8
become U+FFFD, so a client's broken text would be stored as something it never
sent. These helpers decode strictly and turn anything else into one clear
:class:`InvalidInput`; ``status_for`` maps every Runwright error to an answer
that is never a 500. Both serve the same ``/runs/<id>/events``, in the public
shape that ``runner.sse`` streams by default.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from typing import TYPE_CHECKING, Any
from urllib.parse import parse_qsl

from runner.errors import InvalidInput, RunNotFound, RunwrightError, StoreUnavailable
from runner.webhooks import Delivery, Mapped, WebhookReceiver, new_secret
from store.jsonsafe import loads_strict

if TYPE_CHECKING:
    from runner import Engine


def status_for(exc: RunwrightError, *, missing: int = 404) -> int:
    """``missing`` for an unknown run, 503 when the store is down, else 400.

    Approval pages pass ``missing=400``: to them an id that names nothing is
    one more way a link can be wrong.
    """
    if isinstance(exc, RunNotFound):
        return missing
    if isinstance(exc, StoreUnavailable):
        return 503  # not the client's fault: it may retry
    return 400


def json_body(body: bytes) -> Any:
    """The body as strict JSON: UTF-8, no NaN or Infinity, not nested past what
    the parser can take (the engine then applies its own nesting limit)."""
    try:
        text = body.decode("utf-8")
    except UnicodeDecodeError:
        raise InvalidInput("the body is not UTF-8") from None
    return loads_strict(text, "the body")


def check_form(content_type: str | None, body: bytes) -> None:
    """Refuse a form whose fields are not UTF-8 (raw or percent-encoded)."""
    kind = (content_type or "").split(";")[0].strip().lower()
    try:
        if kind == "application/x-www-form-urlencoded":
            parse_qsl(body.decode("utf-8"), keep_blank_values=True, errors="strict")
        elif kind == "multipart/form-data":
            body.decode("utf-8")  # these forms upload no files: every part is text
    except UnicodeDecodeError:
        raise InvalidInput("the form is not UTF-8 text") from None


# ------------------------------------------------------------ run event streams

# Both apps serve GET /runs/<id>/events (runner.sse); the console follows runs itself.
LIVE_KEEPALIVE_SECONDS = 15.0
# A stream ends after this long, and the page's EventSource reconnects after
# the last event it saw: a waiting run does not hold a server thread for days.
LIVE_TIMEOUT_SECONDS = 600.0


# ------------------------------------------------------------------ webhooks

# The route both apps mount at /hooks/<route>: a support tool POSTs a ticket
# as a Standard Webhooks delivery, signed with EXAMPLE_WEBHOOK_SECRET (make one
# with `runwright webhook secret`), and each delivery starts one run.
WEBHOOK_ROUTE = "tickets"
WEBHOOK_SECRET_VARIABLE = "EXAMPLE_WEBHOOK_SECRET"


def ticket_from(delivery: Delivery) -> Mapped:
    """A delivery ``{"message": "...", "customer": "..."}`` as the agent's payload,
    on the customer's thread when it names one."""
    body = delivery.payload
    if not isinstance(body, dict) or not isinstance(body.get("message"), str):
        raise InvalidInput('a ticket is a JSON object with a "message" string')
    customer = body.get("customer")
    thread = f"customer-{customer}" if isinstance(customer, str) and customer else None
    return Mapped({"message": body["message"]}, thread=thread)


def webhook_receiver(engine: Callable[[], Engine], agent: str) -> WebhookReceiver:
    """The example's receiver: the route ``tickets`` starts ``agent``. Without
    EXAMPLE_WEBHOOK_SECRET the route has a secret of this process only, so
    every delivery is refused (401) until one is set."""
    secret = os.environ.get(WEBHOOK_SECRET_VARIABLE) or new_secret()
    return WebhookReceiver(
        engine,
        routes={WEBHOOK_ROUTE: agent},
        secrets={WEBHOOK_ROUTE: [secret]},
        mapper=ticket_from,
    )
