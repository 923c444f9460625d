"""A thread's chat stream as a Flask blueprint (runner/chat/uistream.py).

::

    from runner import default_engine
    from runner.chat.flask import chat_blueprint

    app.register_blueprint(
        chat_blueprint(default_engine, guard=lambda request: current_user_name()),
        url_prefix="/chat",
    )

``GET /chat/threads/<thread>/stream`` streams the thread's runs as the
Vercel AI SDK's UI message stream, and ``/chat/threads/<thread>/agui`` as
AG-UI's event stream (runner/chat/agui.py), resuming after
``Last-Event-ID`` (or ``?after=``). ``guard`` and ``abilities`` are the console's
(runner/console/flask.py): nobody signed in, or a user without
``see_runs`` and ``see_payloads``, gets a 403. Serve the app with threads
(``gunicorn -k gthread``): an open stream holds one.

Flask is imported only here, and this module only by apps that mount it.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

from runner.chat.agui import HEADERS as AGUI_HEADERS
from runner.chat.agui import agui_event
from runner.chat.uistream import DONE, HEADERS, PartShape, refusal, thread_stream
from runner.console.flask import Abilities, Guard, request_abilities
from runner.console.views import LIVE_TIMEOUT_SECONDS
from runner.core.errors import InvalidInput, StoreUnavailable

if TYPE_CHECKING:
    import flask

    from runner.core.engine.engine import Engine


def chat_blueprint(
    engine: Engine | Callable[[], Engine],
    *,
    guard: Guard,
    abilities: Abilities | None = None,
    name: str = "runwright_chat",
    timeout: float = LIVE_TIMEOUT_SECONDS,
) -> flask.Blueprint:
    """The stream's route as a blueprint; mount it with ``url_prefix``.
    ``engine``: an engine, or a factory called on each request.
    ``timeout``: seconds a stream stays open before the client reconnects."""
    from flask import Blueprint, Response, request, stream_with_context

    blueprint = Blueprint(name, __name__)

    def serve(
        thread: str, shape: PartShape | None, end: bytes | None, headers: dict[str, str]
    ) -> Response:
        user = guard(request)
        refused = refusal(user, request_abilities(abilities, request, user))
        if refused is not None:
            return Response(refused, status=403, mimetype="text/plain")
        last = request.headers.get("Last-Event-ID")
        if last is None:
            last = request.args.get("after")
        made = engine() if callable(engine) else engine
        try:
            frames = thread_stream(
                made,
                thread,
                last,
                shape=shape,
                end=end,
                timeout=timeout,
                viewer=user,
                source=f"chat {request.remote_addr or 'unknown'}",
            )
        except InvalidInput as exc:
            return Response(str(exc), status=400, mimetype="text/plain")
        except StoreUnavailable:
            return Response("The store is unavailable; try again.", status=503)
        if frames is None:
            return Response(status=204)
        response = Response(stream_with_context(frames), mimetype="text/event-stream")
        response.headers.update(headers)
        return response

    @blueprint.get("/threads/<thread>/stream")
    def stream(thread: str) -> Response:
        return serve(thread, None, DONE, HEADERS)

    @blueprint.get("/threads/<thread>/agui")
    def agui(thread: str) -> Response:
        return serve(thread, agui_event, None, AGUI_HEADERS)

    return blueprint
