"""Webhook deliveries in a Django project::

    # urls.py
    from django.urls import include, path
    from runner import default_engine
    from runner.webhooks import WebhookReceiver
    from runner.webhooks.django import webhook_urls

    receiver = WebhookReceiver(default_engine, routes={"github": "triage"},
                               secrets={"github": [os.environ["GITHUB_WEBHOOK_SECRET"]]})
    urlpatterns = [path("hooks/", include(webhook_urls(receiver)))]

``POST /hooks/github`` then starts a run of ``triage`` per delivery. The view
is exempt from Django's CSRF check: a delivery proves itself by its signature.
"""

from __future__ import annotations

from django.http import HttpRequest, HttpResponse
from django.urls import URLPattern, path
from django.views.decorators.csrf import csrf_exempt

from runner.webhooks.receiver import Answer, WebhookReceiver


def webhook_urls(receiver: WebhookReceiver, *, name: str = "runwright_webhook") -> list[URLPattern]:
    """The receiver's ``POST <route>`` as URL patterns, for ``include()``."""

    @csrf_exempt
    def deliver(request: HttpRequest, route: str) -> HttpResponse:
        limit = receiver.max_body_bytes
        if request.method != "POST":
            answer = Answer(405, {"error": "deliveries are POSTed"})
        elif _length(request) > limit:
            answer = Answer(413, {"error": f"the body is over {limit} bytes"})
        else:
            # At most one byte past the limit is read: the receiver refuses it.
            answer = receiver.handle(route, dict(request.headers), request.read(limit + 1))
        response = HttpResponse(
            answer.encoded(), status=answer.status, content_type="application/json"
        )
        if answer.status == 405:
            response["Allow"] = "POST"
        return response

    return [path("<str:route>", deliver, name=name)]


def _length(request: HttpRequest) -> int:
    try:
        return int(request.META.get("CONTENT_LENGTH") or 0)
    except ValueError:
        return 0
