"""The console as a Flask blueprint.

::

    from runner import default_engine
    from runner.console.flask import console_blueprint

    app.secret_key = ...  # the CSRF token lives in Flask's session
    app.register_blueprint(
        console_blueprint(default_engine, guard=lambda request: current_user_name()),
        url_prefix="/console",
    )

``guard(request)`` names the signed-in user, or returns None: then every page
answers 403 except an approval link's (``/approvals/<id>?token=...``), which
its token opens. ``abilities(request)``, if given, says what that user may do
(runner/console/abilities.py), e.g.
``abilities=lambda request: {"see_runs", "see_payloads"}`` for someone who
reads but does not decide; without it every signed-in user may do everything.
Decisions made in the console are recorded as the guard's user; those made
through a link as ``"link"``. Serve the app with threads
(``gunicorn -k gthread``): a run page's live stream holds one while it is open.

Flask is imported only here, and this module only by apps that mount it.
"""

from __future__ import annotations

import hmac
import secrets
from collections.abc import Callable, Iterable
from typing import TYPE_CHECKING, Any
from urllib.parse import urlencode

from runner.console.abilities import EVERY_ABILITY, Ability
from runner.console.forms import FormRefused, check_length, parse_form
from runner.console.views import CSRF_FIELD, LIVE_TIMEOUT_SECONDS, ROUTES, Console, Request, Route
from runner.console.views import Response as ConsoleResponse
from runner.core.errors import ConfigurationError

if TYPE_CHECKING:
    import flask

    from runner.core.engine.engine import Engine

SESSION_KEY = "runwright_console_csrf"

Guard = Callable[["flask.Request"], str | None]
Abilities = Callable[["flask.Request"], Iterable[Ability | str]]


def console_blueprint(
    engine: Engine | Callable[[], Engine],
    *,
    guard: Guard,
    abilities: Abilities | None = None,
    name: str = "runwright_console",
    live_timeout: float = LIVE_TIMEOUT_SECONDS,
    login_url: str | None = None,
) -> flask.Blueprint:
    """The console's pages as a blueprint; mount it with ``url_prefix``.
    ``engine``: an engine, or a factory called on each request. ``login_url``:
    where a GET from nobody signed in is sent, with ``?next=`` the page it
    wanted (None: it gets a 403). Registering it on an app without a
    ``secret_key`` raises :class:`ConfigurationError`."""
    from flask import Blueprint

    blueprint = Blueprint(name, __name__)
    consoles: dict[str, Console] = {}

    @blueprint.record_once
    def _require_secret_key(state: Any) -> None:
        if not state.app.secret_key:
            raise ConfigurationError(
                "the Runwright console keeps its CSRF token in Flask's session: "
                "set app.secret_key before registering it"
            )

    def console_here() -> Console:
        from flask import request, url_for

        base = url_for(f"{request.blueprint}.runs").rstrip("/")
        made = consoles.get(base)
        if made is None:
            made = consoles[base] = Console(engine, base_url=base, live_timeout=live_timeout)
        return made

    for route in ROUTES:
        blueprint.add_url_rule(
            route.rule,
            route.name,
            _view(route, console_here, guard, abilities, login_url),
            methods=[route.method],
        )
    return blueprint


def _view(
    route: Route,
    console_here: Callable[[], Console],
    guard: Guard,
    abilities: Abilities | None,
    login_url: str | None,
) -> Callable[..., Any]:
    def view(**params: str) -> flask.Response:
        from flask import request

        console = console_here()
        user = guard(request)
        if user is None and login_url and not route.public and request.method == "GET":
            wanted = request.full_path.rstrip("?")  # werkzeug ends a bare path with "?"
            target = f"{login_url}?{urlencode({'next': wanted})}"
            return _to_flask(ConsoleResponse(303, "", {"Location": target}))
        token = _session_token()
        form: dict[str, str] = {}
        csrf_ok = False
        if request.method == "POST":
            try:
                form = _form(request)
            except FormRefused as refused:
                anonymous = Request(request.method, user=user)
                return _to_flask(
                    console.error(refused.status, "Bad request", str(refused), anonymous)
                )
            csrf_ok = csrf_valid(form.get(CSRF_FIELD))
        last = request.headers.get("Last-Event-ID")
        headers = {} if last is None else {"Last-Event-ID": last}
        answer = console.handle(
            route.name,
            Request(
                method=request.method,
                params=params,
                query=request.args.to_dict(flat=True),
                form=form,
                user=user,
                csrf_ok=csrf_ok,
                csrf_token=token,
                headers=headers,
                remote=request.remote_addr,
                abilities=request_abilities(abilities, request, user),
            ),
        )
        return _to_flask(answer)

    view.__name__ = f"console_{route.name}"
    return view


def request_abilities(
    abilities: Abilities | None, request: flask.Request, user: str | None
) -> frozenset[Ability]:
    """What the signed-in ``user`` may do, by the app's ``abilities``
    callable (everything without one); nobody signed in may do nothing."""
    if user is None:
        return frozenset()
    if abilities is None:
        return EVERY_ABILITY
    given = list(abilities(request))
    try:
        return frozenset(Ability(ability) for ability in given)
    except ValueError:
        names = ", ".join(a.value for a in Ability)
        raise ConfigurationError(
            f"the console's abilities callable returned {given!r}: each is one of {names}"
        ) from None


def csrf_token() -> str:
    """This session's console CSRF token, for the host app's own forms (its
    sign-in form, say): put it in a ``csrf_token`` field and check the POST
    with :func:`csrf_valid`."""
    return _session_token()


def csrf_valid(sent: object) -> bool:
    """Whether ``sent`` (a form's ``csrf_token``) is this session's token."""
    token = _session_token()
    return (
        isinstance(sent, str) and bool(sent) and hmac.compare_digest(sent.encode(), token.encode())
    )


def _session_token() -> str:
    from flask import session

    token = session.get(SESSION_KEY)
    if not isinstance(token, str) or len(token) < 32:
        token = session[SESSION_KEY] = secrets.token_urlsafe(32)
    return token


def _form(request: flask.Request) -> dict[str, str]:
    if not check_length(request.content_type, request.content_length):
        return {}
    return parse_form(request.get_data(cache=False))


def _to_flask(answer: ConsoleResponse) -> flask.Response:
    from flask import Response, stream_with_context

    body = answer.body
    content = body if isinstance(body, str) else stream_with_context(body)
    response = Response(content, status=answer.status, content_type=answer.content_type)
    response.headers.update(answer.headers)
    return response
