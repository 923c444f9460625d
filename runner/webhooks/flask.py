"""Webhook deliveries in a Flask app::

    from runner import default_engine
    from runner.webhooks import WebhookReceiver
    from runner.webhooks.flask import webhook_blueprint

    receiver = WebhookReceiver(default_engine, routes={"github": "triage"},
                               secrets={"github": [os.environ["GITHUB_WEBHOOK_SECRET"]]})
    app.register_blueprint(webhook_blueprint(receiver), url_prefix="/hooks")

``POST /hooks/github`` then starts a run of ``triage`` per delivery. Flask is
imported only here, and this module only by apps that mount it.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from runner.webhooks.receiver import Answer, WebhookReceiver

if TYPE_CHECKING:
    import flask


def webhook_blueprint(
    receiver: WebhookReceiver, *, name: str = "runwright_webhooks"
) -> flask.Blueprint:
    """The receiver's ``POST /<route>`` as a blueprint; mount it with ``url_prefix``."""
    from flask import Blueprint, Response, request

    blueprint = Blueprint(name, __name__)

    @blueprint.post("/<route>")
    def deliver(route: str) -> Response:
        limit = receiver.max_body_bytes
        if request.content_length is not None and request.content_length > limit:
            answer = Answer(413, {"error": f"the body is over {limit} bytes"})
        else:
            # At most one byte past the limit is read: the receiver refuses it.
            body = request.stream.read(limit + 1)
            answer = receiver.handle(route, dict(request.headers), body)
        return Response(answer.encoded(), status=answer.status, content_type="application/json")

    return blueprint
