"""A thread's chat stream as a Django view (runner/chat/uistream.py).

::

    from django.urls import path
    from runner.chat.django import stream_view

    urlpatterns = [
        path("chat/threads/<str:thread>/stream", stream_view),
        path("chat/threads/<str:thread>/agui", agui_view),  # AG-UI's event stream
    ]

The engine is the console's (``RUNWRIGHT_CONSOLE_ENGINE``), and so are the
rules: a user who is signed in, active, and holds the console's
``view_run`` and ``view_payloads`` permissions (runner/console/django/views.py);
anyone else gets a 403. It resumes after ``Last-Event-ID`` (or ``?after=``).
Serve it from WSGI with threads, as the console.
"""

from __future__ import annotations

from typing import Any

from django.conf import settings
from django.db import transaction
from django.http import HttpRequest, HttpResponse, StreamingHttpResponse

from runner.chat.agui import HEADERS as AGUI_HEADERS
from runner.chat.agui import agui_event
from runner.chat.uistream import DONE, HEADERS, PartShape, refusal, thread_stream
from runner.console.abilities import Ability
from runner.console.django.views import LIVE_TIMEOUT_SETTING, abilities_of, engine_factory
from runner.console.views import LIVE_TIMEOUT_SECONDS
from runner.core.errors import InvalidInput, StoreUnavailable


def stream_view(request: HttpRequest, thread: str) -> Any:
    """``GET``: the thread's runs as the AI SDK's UI message stream."""
    return _serve(request, thread, None, DONE, HEADERS)


def agui_view(request: HttpRequest, thread: str) -> Any:
    """``GET``: the thread's runs as AG-UI's event stream (runner/chat/agui.py)."""
    return _serve(request, thread, agui_event, None, AGUI_HEADERS)


def _serve(
    request: HttpRequest,
    thread: str,
    shape: PartShape | None,
    end: bytes | None,
    headers: dict[str, str],
) -> Any:
    if request.method not in ("GET", "HEAD"):
        answer = HttpResponse(status=405)
        answer["Allow"] = "GET"
        return answer
    user = getattr(request, "user", None)
    name: str | None = None
    abilities: frozenset[Ability] = frozenset()
    if user is not None and user.is_authenticated and user.is_active:
        name = user.get_username()
        abilities = abilities_of(user)
    refused = refusal(name, abilities)
    if refused is not None:
        return HttpResponse(refused, status=403, content_type="text/plain")
    last = request.headers.get("Last-Event-ID")
    if last is None:
        last = request.GET.get("after")
    timeout = float(getattr(settings, LIVE_TIMEOUT_SETTING, LIVE_TIMEOUT_SECONDS))
    try:
        frames = thread_stream(
            engine_factory()(),
            thread,
            last,
            shape=shape,
            end=end,
            timeout=timeout,
            viewer=name,
            source=f"chat {request.META.get('REMOTE_ADDR') or 'unknown'}",
        )
    except InvalidInput as exc:
        return HttpResponse(str(exc), status=400, content_type="text/plain")
    except StoreUnavailable:
        return HttpResponse("The store is unavailable; try again.", status=503)
    if frames is None:
        return HttpResponse(status=204)
    response = StreamingHttpResponse(frames, content_type="text/event-stream")
    for header, value in headers.items():
        response[header] = value
    return response


def _non_atomic(view: Any) -> Any:
    # The stream must not hold a transaction open (ATOMIC_REQUESTS) while it
    # waits for a run's events.
    for alias in settings.DATABASES:
        view = transaction.non_atomic_requests(using=alias)(view)
    return view


stream_view = _non_atomic(stream_view)
agui_view = _non_atomic(agui_view)
