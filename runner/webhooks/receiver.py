"""A receiver of Standard Webhooks deliveries that start runs (docs/triggers.md).

Each delivery to ``/<route>`` is verified with the ``standardwebhooks``
package against the route's secrets (several at once, for rotation), then
starts one run of the route's agent: its trigger is ``source="webhook"``,
``trigger=<route>``, and its id is ``webhook:<route>:<webhook-id>``
(:func:`delivery_trigger_id`), so a redelivery (the sender retries what it did
not see acknowledged) finds the run the first one started and starts nothing,
while the same id from another route is another delivery. Anything else gets
one 4xx line and writes nothing: an unknown route, a body over the limit, a
missing or malformed header, a ``webhook-id`` in the namespace of the ids the
engine derives itself, a wrong signature, a timestamp outside the
specification's five minutes, a body that is not UTF-8 JSON.

The receiver is framework-neutral (:meth:`WebhookReceiver.handle`), with a
WSGI application (:attr:`WebhookReceiver.wsgi_app`) and Flask and Django
adapters (``runner.webhooks.flask``, ``runner.webhooks.django``).
"""

from __future__ import annotations

import base64
import binascii
import json
import logging
import secrets
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from runner.core.errors import (
    AgentNotFound,
    ConfigurationError,
    InvalidInput,
    PayloadTooLarge,
    StoreUnavailable,
)
from store.validate import MAX_ID_CHARS

if TYPE_CHECKING:
    from runner.core.engine.engine import Engine

log = logging.getLogger(__name__)

SECRET_PREFIX = "whsec_"
# The specification suggests secrets of 24 to 64 bytes; fewer than 16 is refused.
MIN_SECRET_BYTES = 16
DEFAULT_MAX_BODY_BYTES = 256 * 1024
MAX_HEADER_CHARS = 2048
HEADERS = ("webhook-id", "webhook-timestamp", "webhook-signature")
# The prefixes of the trigger ids the engine derives, which name runs it
# starts itself: a schedule's firing (runner/core/schedules/times.py trigger_id),
# a child run (runner/core/children.py child_trigger_id) and a delivery's own
# (delivery_trigger_id). A webhook-id that begins with one is refused: namespaced,
# it could not collide, but it reads as another source's, and a trigger id a
# deployment wrote before delivery ids were namespaced is the sender's bare id.
RESERVED_ID_PREFIXES = ("schedule:", "child:", "webhook:")


def new_secret() -> str:
    """A new ``whsec_`` secret (32 random bytes), for a sender and this receiver."""
    return SECRET_PREFIX + base64.b64encode(secrets.token_bytes(32)).decode()


def check_secret(secret: object, owner: str) -> str:
    """A ``whsec_`` secret of at least :data:`MIN_SECRET_BYTES` bytes;
    ``owner`` names who holds it, for the error."""
    if not isinstance(secret, str) or not secret.startswith(SECRET_PREFIX):
        raise ConfigurationError(f"{owner}: a secret is 'whsec_' and base64")
    try:
        raw = base64.b64decode(secret[len(SECRET_PREFIX) :], validate=True)
    except (binascii.Error, ValueError):
        raise ConfigurationError(f"{owner}: a secret after 'whsec_' must be base64") from None
    if len(raw) < MIN_SECRET_BYTES:
        raise ConfigurationError(
            f"{owner}: a secret must hold at least {MIN_SECRET_BYTES} bytes "
            "(runwright webhook secret makes one)"
        )
    return secret


def delivery_trigger_id(route: str, delivery_id: str) -> str:
    """The trigger id of a delivery's run: its route and its ``webhook-id``.
    A route name has no ``:``, so no two (route, id) pairs share one."""
    return f"webhook:{route}:{delivery_id}"


def check_route(route: object) -> str:
    """A route name: not empty, and without ``:`` or ``/`` (the namespace of
    its trigger ids, and the path it is mounted at)."""
    if not isinstance(route, str) or not route or ":" in route or "/" in route:
        raise ConfigurationError(
            f"webhook route {str(route)[:80]!r}: a route's name is not empty and has no ':' or '/'"
        )
    return route


@dataclass(frozen=True)
class Delivery:
    """A verified delivery, as the route's ``mapper`` receives it."""

    route: str
    id: str
    timestamp: int
    payload: Any
    headers: Mapping[str, str]


@dataclass(frozen=True)
class Mapped:
    """What a ``mapper`` makes of a delivery: the run's payload, and its
    thread, keys and priority (0 to 9, docs/flow-control.md)."""

    payload: Any
    thread: str | None = None
    keys: Mapping[str, str] = field(default_factory=dict)
    priority: int = 0


Mapper = Callable[[Delivery], Mapped]


@dataclass(frozen=True)
class Answer:
    """The receiver's answer: a status and one JSON object."""

    status: int
    body: dict[str, Any]

    def encoded(self) -> bytes:
        return json.dumps(self.body, separators=(",", ":")).encode()


class Refused(InvalidInput):
    """A delivery the receiver turns away; ``status`` says how (4xx)."""

    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status


def _default_mapper(delivery: Delivery) -> Mapped:
    return Mapped(payload=delivery.payload)


class WebhookReceiver:
    """Deliveries to ``/<route>`` start runs of ``routes[route]``.

    ``engine``: an engine, or a zero-argument factory called on each delivery
    (``runner.default_engine``). ``secrets``: each route's ``whsec_`` secrets;
    a delivery signed with any of them verifies (list the new one beside the
    old while senders move over). ``mapper``: turns a delivery into the run's
    payload, thread and keys (by default the delivery's JSON is the payload).
    ``max_body_bytes``: larger bodies get 413 before they are read whole."""

    def __init__(
        self,
        engine: Engine | Callable[[], Engine],
        *,
        routes: Mapping[str, str],
        secrets: Mapping[str, Sequence[str]],
        mapper: Mapper | None = None,
        max_body_bytes: int = DEFAULT_MAX_BODY_BYTES,
    ) -> None:
        from standardwebhooks import Webhook

        self._engine = engine
        self.routes = {check_route(route): agent for route, agent in routes.items()}
        self.mapper = mapper or _default_mapper
        self.max_body_bytes = max_body_bytes
        self._verifiers: dict[str, list[Webhook]] = {}
        for route in self.routes:
            given = secrets.get(route)
            if isinstance(given, str):
                raise ConfigurationError(f"webhook route {route!r}: give its secrets as a list")
            if not given:
                raise ConfigurationError(f"webhook route {route!r} has no secret")
            owner = f"webhook route {route!r}"
            self._verifiers[route] = [Webhook(check_secret(s, owner)) for s in given]
        unknown = sorted(set(secrets) - set(self.routes))
        if unknown:
            raise ConfigurationError(f"secrets given for routes that do not exist: {unknown}")

    @property
    def engine(self) -> Engine:
        made = self._engine
        return made() if callable(made) else made

    # ------------------------------------------------------------ handling

    def handle(self, route: str, headers: Mapping[str, str], body: bytes) -> Answer:
        """Verify one delivery to ``route`` and start its run (or find the one
        it started before)."""
        try:
            return self._handle(route, headers, body)
        except Refused as refused:
            log.info("webhook %r refused (%d): %s", route[:80], refused.status, refused.message)
            return Answer(refused.status, {"error": refused.message})
        except StoreUnavailable:
            log.warning("webhook %r: the store cannot be reached; the sender retries", route)
            return Answer(503, {"error": "the store cannot be reached now; retry later"})
        except AgentNotFound as exc:
            # The deployment's fault, not the sender's: a 5xx, and it retries.
            log.error("webhook %r: %s", route, exc.message)
            return Answer(500, {"error": f"route {route!r} cannot start its agent here"})

    def _handle(self, route: str, headers: Mapping[str, str], body: bytes) -> Answer:
        agent = self.routes.get(route)
        if agent is None:
            raise Refused(404, f"no webhook route named {route[:80]!r}")
        if len(body) > self.max_body_bytes:
            raise Refused(413, f"the body is over {self.max_body_bytes} bytes")
        found = {k.lower(): v for k, v in headers.items() if k.lower() in HEADERS}
        missing = [name for name in HEADERS if not found.get(name)]
        if missing:
            raise Refused(400, f"missing header {missing[0]}")
        for name, value in found.items():
            if len(value) > MAX_HEADER_CHARS or not value.isascii() or not value.isprintable():
                raise Refused(400, f"header {name} is not printable ASCII of a sane length")
        delivery_id = found["webhook-id"]
        room = MAX_ID_CHARS - len(delivery_trigger_id(route, ""))
        if len(delivery_id) > room:
            raise Refused(400, f"webhook-id is longer than {room} characters")
        reserved = next((p for p in RESERVED_ID_PREFIXES if delivery_id.startswith(p)), None)
        if reserved is not None:
            raise Refused(
                400,
                f"webhook-id begins with {reserved!r}, which names runs the engine starts "
                f"itself ({', '.join(RESERVED_ID_PREFIXES)}); give the delivery another id",
            )
        self._verify(route, found, body)
        payload = _json(body)
        sent_at = int(float(found["webhook-timestamp"]))  # verified: a number
        delivery = Delivery(route, delivery_id, sent_at, payload, found)
        try:
            mapped = self.mapper(delivery)
        except (InvalidInput, ValueError, TypeError, KeyError) as exc:
            raise Refused(422, f"the delivery cannot be mapped to a run: {exc}") from None
        if not isinstance(mapped, Mapped):
            raise ConfigurationError(
                f"the mapper of route {route!r} must return a Mapped, not {type(mapped).__name__}"
            )
        # A delivery a deployment took before ids were namespaced has the
        # sender's bare id: its redelivery finds that run, not a second one.
        earlier = self.engine.run_by_trigger(agent, delivery_id)
        if earlier is not None and (earlier.trigger.source, earlier.trigger.trigger) == (
            "webhook",
            route,
        ):
            return Answer(
                200, {"run_id": earlier.id, "agent": earlier.agent, "status": earlier.status.value}
            )
        try:
            run = self.engine.start(
                agent,
                mapped.payload,
                source="webhook",
                trigger=route,
                id=delivery_trigger_id(route, delivery_id),
                keys={**mapped.keys, "webhook_id": delivery_id},
                thread=mapped.thread,
                priority=mapped.priority,
            )
        except PayloadTooLarge as exc:
            raise Refused(413, exc.message) from None
        except AgentNotFound:
            raise
        except InvalidInput as exc:
            raise Refused(422, exc.message) from None
        return Answer(200, {"run_id": run.id, "agent": run.agent, "status": run.status.value})

    def _verify(self, route: str, headers: Mapping[str, str], body: bytes) -> None:
        """The signature, with the standard's own library: any of the route's
        secrets will do. Its errors are its words; ours say which part failed."""
        from standardwebhooks import WebhookVerificationError

        try:
            text = body.decode("utf-8")
        except UnicodeDecodeError:
            raise Refused(400, "the body is not UTF-8") from None
        for verifier in self._verifiers[route]:
            try:
                verifier.verify(text, dict(headers), json_parse=False)
                return
            except WebhookVerificationError as exc:
                said = str(exc)
                if said == "Invalid Signature Headers":
                    raise Refused(400, "webhook-timestamp is not a number of seconds") from None
                if "timestamp" in said.lower():  # too old or too new: the same for every secret
                    raise Refused(401, f"webhook-timestamp refused: {said}") from None
            except (ValueError, binascii.Error):
                raise Refused(400, "webhook-signature is not 'v1,<base64>' entries") from None
        raise Refused(401, "no signature matches the route's secrets")

    # -------------------------------------------------------------- WSGI

    def wsgi_app(
        self, environ: dict[str, Any], start_response: Callable[..., Any]
    ) -> Iterable[bytes]:
        """A WSGI application: ``POST /<route>`` (mount it at a prefix of your
        choice with your server's or framework's dispatcher)."""
        path = environ.get("PATH_INFO", "") or ""
        route = path[1:] if path.startswith("/") else path
        if environ.get("REQUEST_METHOD") != "POST":
            answer = Answer(405, {"error": "deliveries are POSTed"})
        elif "/" in route or not route:
            answer = Answer(404, {"error": "no such webhook route"})
        else:
            answer = self._wsgi_delivery(route, environ)
        body = answer.encoded()
        headers = [("Content-Type", "application/json"), ("Content-Length", str(len(body)))]
        if answer.status == 405:
            headers.append(("Allow", "POST"))
        start_response(f"{answer.status} {_REASONS.get(answer.status, 'Error')}", headers)
        return [body]

    def _wsgi_delivery(self, route: str, environ: Mapping[str, Any]) -> Answer:
        try:
            length = int(environ.get("CONTENT_LENGTH") or 0)
        except ValueError:
            return Answer(400, {"error": "Content-Length is not a number"})
        if length > self.max_body_bytes:
            return Answer(413, {"error": f"the body is over {self.max_body_bytes} bytes"})
        body = environ["wsgi.input"].read(length) if length > 0 else b""
        headers = {
            key[5:].replace("_", "-").lower(): value
            for key, value in environ.items()
            if key.startswith("HTTP_")
        }
        return self.handle(route, headers, body)


def _json(body: bytes) -> Any:
    """The delivery's JSON (a NaN or an infinity is not JSON)."""

    def refuse(constant: str) -> Any:
        raise Refused(400, f"the body is not JSON ({constant} is not a JSON number)")

    try:
        return json.loads(body, parse_constant=refuse)
    except (ValueError, RecursionError):
        raise Refused(400, "the body is not JSON") from None


_REASONS = {
    200: "OK",
    400: "Bad Request",
    401: "Unauthorized",
    404: "Not Found",
    405: "Method Not Allowed",
    413: "Payload Too Large",
    422: "Unprocessable Entity",
    500: "Internal Server Error",
    503: "Service Unavailable",
}
