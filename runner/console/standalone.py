"""The console as a plain WSGI application that signs its users in itself,
for teams without a Python web app to mount it in (``runwright console``).

::

    from runner import Engine
    from runner.console.server import serve
    from runner.console.standalone import StandaloneConsole

    app = StandaloneConsole(Engine.from_env(), accounts="/etc/runwright/console-users",
                            secret_key=..., prefix="/console")
    serve(app, "127.0.0.1", 8765)

Accounts live in a file (``runner.console.accounts``), each with a role that
says what it may do (``runner.console.abilities``); a session is a signed
cookie (``runner.console.sessions``); the rules of signing in and of a
session's end are ``runner.console.signin``'s, which the Flask example shares.
The pages and their rules are :class:`~runner.console.views.Console`'s: this
module routes, carries sessions in cookies, checks CSRF tokens and decodes
forms strictly (``runner.console.forms``), and nothing else. No framework is
imported.
"""

from __future__ import annotations

import logging
import math
import os
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from http import HTTPStatus
from typing import TYPE_CHECKING, Any
from urllib.parse import quote

from runner.console.abilities import Ability
from runner.console.accounts import Accounts, AccountsFile
from runner.console.assets import PAGE_HEADERS
from runner.console.forms import FormRefused
from runner.console.render import e, hidden, page
from runner.console.sessions import (
    PRESESSION_COOKIE,
    SESSION_COOKIE,
    SESSION_SECONDS,
    LoginLimiter,
    PreSession,
    Session,
    cookie_values,
    set_cookie,
)
from runner.console.signin import MAX_NEXT_CHARS, UNAVAILABLE, Refused, SignIn, local_next
from runner.console.views import CSRF_FIELD, LIVE_TIMEOUT_SECONDS, Console, Request, Route
from runner.console.views import Response as ConsoleResponse
from runner.console.wsgi import (
    Router,
    StartResponse,
    check_prefix,
    request_form,
    request_path,
    request_query,
    send,
    wanted_path,
)
from runner.core.errors import ConfigurationError

if TYPE_CHECKING:
    from runner.core.engine.engine import Engine

log = logging.getLogger(__name__)

LOGIN = "/login"
LOGOUT = "/logout"


@dataclass
class _Visit:
    """One request, as far as this module needs it."""

    method: str
    path: str  # under the prefix, decoded
    address: str
    holder: Session | PreSession
    accounts: Accounts | None  # None: the accounts file cannot be used now
    cookies: list[str] = field(default_factory=list)  # Set-Cookie values

    @property
    def user(self) -> str | None:
        return self.holder.user if isinstance(self.holder, Session) else None

    @property
    def abilities(self) -> frozenset[Ability]:
        """What the signed-in account's role lets it do, as the accounts file
        says now (a role changed there holds from the next request)."""
        user = self.user
        if user is None or self.accounts is None:
            return frozenset()
        return self.accounts.abilities(user)


class StandaloneConsole:
    """A WSGI application: the console under ``prefix`` ("" or a path like
    ``/console``), for the accounts of ``accounts`` (a file path, read again
    when it changes, or :class:`Accounts`), with sessions signed by a key
    derived from ``secret_key`` (``RUNWRIGHT_SECRET_KEY``). ``secure_cookies``:
    mark the cookies ``Secure`` (when a TLS proxy serves the console)."""

    def __init__(
        self,
        engine: Engine | Callable[[], Engine],
        *,
        accounts: Accounts | AccountsFile | str | os.PathLike[str],
        secret_key: str,
        prefix: str = "",
        secure_cookies: bool = False,
        session_seconds: float = SESSION_SECONDS,
        live_timeout: float = LIVE_TIMEOUT_SECONDS,
        limiter: LoginLimiter | None = None,
        clock: Callable[[], float] = time.time,
    ) -> None:
        if not (secret_key or "").strip():
            raise ConfigurationError("the standalone console needs RUNWRIGHT_SECRET_KEY")
        self.prefix = check_prefix(prefix)
        self.console = Console(
            engine, base_url=self.prefix, live_timeout=live_timeout, sign_out=self.prefix + LOGOUT
        )
        self.signin = SignIn(
            accounts,
            secret_key=secret_key,
            session_seconds=session_seconds,
            limiter=limiter,
            clock=clock,
        )
        self.sessions = self.signin.sessions
        self.limiter = self.signin.limiter
        self.secure = secure_cookies
        self._cookie_path = self.prefix or "/"
        self._router = Router()

    # ------------------------------------------------------------- WSGI

    def __call__(self, environ: dict[str, Any], start_response: StartResponse) -> Iterable[bytes]:
        cookies: list[str] = []
        try:
            answer, cookies = self._answer(environ)
        except Exception:
            log.exception("the console failed on %s", environ.get("PATH_INFO", "")[:200])
            message = "Something went wrong; the server's log says what."
            answer = self.console.error(500, "Server error", message, Request("GET"))
        return send(environ, start_response, answer, cookies)

    # ---------------------------------------------------------- routing

    def _answer(self, environ: Mapping[str, Any]) -> tuple[ConsoleResponse, list[str]]:
        method = str(environ.get("REQUEST_METHOD", "GET")).upper()
        path = request_path(environ)
        if path is None:
            return self._refuse(400, "The address is not UTF-8 text."), []
        if not path.startswith(self.prefix + "/"):
            if path == self.prefix:
                return ConsoleResponse(308, "", {"Location": self.prefix + "/"}), []
            return self._refuse(404, "The console has no such page."), []
        visit = self._visit(environ, method, path[len(self.prefix) :])
        try:
            query = request_query(environ)
            form = request_form(environ) if method == "POST" else {}
        except FormRefused as refused:
            return self._error(visit, refused.status, "Bad request", str(refused)), visit.cookies
        if visit.path == LOGIN:
            return self._login(visit, query, form), visit.cookies
        if visit.path == LOGOUT:
            return self._logout(visit, form), visit.cookies
        found = self._route(visit)
        if isinstance(found, ConsoleResponse):
            return found, visit.cookies
        route, params = found
        if method in ("GET", "HEAD") and visit.user is None and _wants_sign_in(route, query):
            return self._to_login(environ, path), visit.cookies
        last = environ.get("HTTP_LAST_EVENT_ID")
        request = Request(
            method=method,
            params=params,
            query=query,
            form=form,
            user=visit.user,
            csrf_ok=method == "POST" and self._csrf_ok(visit, form),
            csrf_token=self.sessions.csrf_token(visit.holder),
            headers={} if last is None else {"Last-Event-ID": last},
            remote=visit.address or None,
            abilities=visit.abilities,
        )
        return self.console.handle(route.name, request), visit.cookies

    def _route(self, visit: _Visit) -> tuple[Route, dict[str, str]] | ConsoleResponse:
        found = self._router.match(visit.method, visit.path)
        if isinstance(found, tuple):
            return found
        if not found:
            return self._error(visit, 404, "Not found", "The console has no such page.")
        uses = " or ".join(method for method in found if method != "HEAD")
        answer = self._error(visit, 405, "Method not allowed", f"Use {uses}.")
        answer.headers["Allow"] = ", ".join(found)
        return answer

    # --------------------------------------------------------- sessions

    def _visit(self, environ: Mapping[str, Any], method: str, path: str) -> _Visit:
        """Who sends the request: a session whose account still has the
        password it was signed in with, else a pre-session (a new one if
        the request has none)."""
        accounts = self.signin.accounts()
        header = str(environ.get("HTTP_COOKIE", ""))
        cookies: list[str] = []
        holder: Session | PreSession | None = self.signin.session(
            cookie_values(header, SESSION_COOKIE)
        )
        if holder is None:
            if accounts is not None and cookie_values(header, SESSION_COOKIE):
                # Expired, tampered with, or of an old password: forget it.
                cookies.append(self._cookie(SESSION_COOKIE, "", 0))
            holder = self._pre_session(header)
        if holder is None:
            value, holder = self.sessions.issue_pre()
            cookies.append(self._cookie(PRESESSION_COOKIE, value))
        address = str(environ.get("REMOTE_ADDR", ""))
        return _Visit(method, path, address, holder, accounts, cookies)

    def _pre_session(self, header: str) -> PreSession | None:
        for value in cookie_values(header, PRESESSION_COOKIE):
            pre = self.sessions.read_pre(value)
            if pre is not None:
                return pre
        return None

    def _cookie(self, name: str, value: str, max_age: int | None = None) -> str:
        if max_age is None:
            max_age = math.floor(self.sessions.lifetime)
        return set_cookie(name, value, path=self._cookie_path, secure=self.secure, max_age=max_age)

    def _csrf_ok(self, visit: _Visit, form: Mapping[str, str]) -> bool:
        return self.sessions.csrf_ok(visit.holder, form.get(CSRF_FIELD, ""))

    # ---------------------------------------------------- sign in / out

    def _login(
        self, visit: _Visit, query: Mapping[str, str], form: Mapping[str, str]
    ) -> ConsoleResponse:
        if visit.method in ("GET", "HEAD"):
            target = self._next(query.get("next"))
            if visit.user is not None:
                return ConsoleResponse(303, "", {"Location": target})
            if visit.accounts is None:
                return self._login_page(visit, target, 503, UNAVAILABLE)
            return self._login_page(visit, target)
        if visit.method != "POST":
            answer = self._error(visit, 405, "Method not allowed", "Use GET or POST.")
            answer.headers["Allow"] = "GET, HEAD, POST"
            return answer
        target = self._next(form.get("next"))
        name, password = form.get("name", ""), form.get("password", "")
        if not self._csrf_ok(visit, form):
            return self._login_page(visit, target, 403, _STALE, name=name)
        outcome = self.signin.attempt(name, password, visit.address)
        if isinstance(outcome, Refused):
            answer = self._login_page(visit, target, outcome.status, outcome.message, name=name)
            if outcome.retry_after is not None:
                answer.headers["Retry-After"] = str(outcome.retry_after)
            return answer
        visit.cookies.append(self._cookie(SESSION_COOKIE, outcome.value))
        visit.cookies.append(self._cookie(PRESESSION_COOKIE, "", 0))
        return ConsoleResponse(303, "", {"Location": target})

    def _logout(self, visit: _Visit, form: Mapping[str, str]) -> ConsoleResponse:
        if visit.method != "POST":
            answer = self._error(visit, 405, "Method not allowed", "Use POST.")
            answer.headers["Allow"] = "POST"
            return answer
        session = visit.holder
        if isinstance(session, Session):
            if not self._csrf_ok(visit, form):
                return self._error(visit, 403, "Not done", _STALE_SIGN_OUT)
            self.signin.end(session)
            visit.cookies.append(self._cookie(SESSION_COOKIE, "", 0))
        return ConsoleResponse(303, "", {"Location": self.prefix + LOGIN})

    def _to_login(self, environ: Mapping[str, Any], path: str) -> ConsoleResponse:
        wanted = wanted_path(environ, path)
        target = self.prefix + LOGIN
        if len(wanted) <= MAX_NEXT_CHARS:
            target += "?next=" + quote(wanted, safe="")
        return ConsoleResponse(303, "", {"Location": target})

    def _next(self, raw: str | None) -> str:
        """Where to go after signing in: a path of this console, or its runs page."""
        return local_next(raw, self.prefix, avoid=(self.prefix + LOGIN, self.prefix + LOGOUT))

    # ------------------------------------------------------------ pages

    def _login_page(
        self,
        visit: _Visit,
        target: str,
        status: int = 200,
        problem: str | None = None,
        *,
        name: str = "",
    ) -> ConsoleResponse:
        note = f'<p class="problem">{e(problem)}</p>' if problem else ""
        shown = name if len(name) <= 150 else ""
        body = (
            f"<h1>Sign in to the Runwright console</h1>{note}"
            f'<form class="filters" method="post" action="{e(self.prefix + LOGIN)}">'
            f"{hidden(CSRF_FIELD, self.sessions.csrf_token(visit.holder))}"
            f"{hidden('next', target)}"
            '<label>Name <input name="name" autocomplete="username" required '
            f'maxlength="150" autofocus value="{e(shown)}"></label>'
            '<label>Password <input name="password" type="password" '
            'autocomplete="current-password" required></label>'
            '<button type="submit">Sign in</button></form>'
        )
        html = page("Sign in", body, base=None, user=None)
        return ConsoleResponse(status, html, dict(PAGE_HEADERS))

    def _error(self, visit: _Visit, status: int, title: str, message: str) -> ConsoleResponse:
        request = Request(
            visit.method, user=visit.user, csrf_token=self.sessions.csrf_token(visit.holder)
        )
        return self.console.error(status, title, message, request)

    def _refuse(self, status: int, message: str) -> ConsoleResponse:
        title = HTTPStatus(status).phrase
        return self.console.error(status, title, message, Request("GET"))


_STALE = (
    "The sign-in form was stale or was not sent from this console. Nothing was checked: "
    "sign in again."
)
_STALE_SIGN_OUT = (
    "The form did not carry this session's CSRF token; you are still signed in. "
    "Reload the page and try again."
)


def _wants_sign_in(route: Route, query: Mapping[str, str]) -> bool:
    """An anonymous GET that the sign-in page answers better than a 403: a
    console page (not its event stream, which a script reads), or an
    approval's address without a link's token."""
    if route.name == "events":
        return False
    if route.public:
        return route.name == "approval" and "token" not in query
    return True


__all__ = ["LOGIN", "LOGOUT", "StandaloneConsole"]
