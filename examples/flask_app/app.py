"""A Flask app that starts Runwright runs and mounts the Runwright console.

Run it (with a worker started with ``RUNWRIGHT_AGENTS=examples.agents``)::

    runwright console add-user alice --users .runwright/console-users
    EXAMPLE_CONSOLE_USERS=.runwright/console-users FLASK_SECRET_KEY=... \\
        flask --app examples.flask_app.app:create_app run

    curl -X POST localhost:5000/runs -H 'content-type: application/json' \\
         -d '{"agent": "support_triage", "payload": {"message": "A-1001 arrived broken"}}'

A support tool can start runs by webhook: ``POST /hooks/tickets`` takes a
Standard Webhooks delivery ``{"message": ...}`` signed with
``EXAMPLE_WEBHOOK_SECRET`` (``runwright webhook secret`` makes one), one run per
delivery however often it is redelivered (docs/triggers.md).

The console is at ``/console``: sign in at ``/login``, then the runs, a run's
live timeline and the approvals inbox. The notifier also puts each approval's
link in the example inbox (see ``examples.agents``): the link opens that one
approval in the console, without signing in. ``GET /runs/<id>`` is the run as
JSON, and ``GET /runs/<id>/events`` its Server-Sent Events for other clients,
without tool input (serve the app with threads: each open stream holds one;
``flask run`` does).

How the console is mounted is the part to copy: ``console_blueprint`` with a
``guard`` that names the signed-in user from your own sign-in (with
Flask-Login, ``current_user.get_id()``). Here the sign-in is the console's own
(``runner.console.signin``, as ``runwright console`` does it): guessing is
slowed down per name and per address, at most two passwords are hashed at
once, ``next=`` only leads into the console, and the session in Flask's cookie
ends when its user signs out (a copy of the cookie too) or gets a new
password. The limiter's counts and the signed-out sessions are in the
process's memory: serve the app from one process (with threads), or keep
them in a store your processes share. Behind a proxy, let Flask see the
client's address (werkzeug's ``ProxyFix``): the limiter counts
``request.remote_addr``.

Bad input of any kind (not UTF-8, not JSON, too deep, too large, an unknown
agent, a malformed id or token) is a 400 with one clear error, never a 500.
"""

from __future__ import annotations

import os
import secrets
from typing import Any

from flask import Flask, jsonify, redirect, request, session
from flask.typing import ResponseReturnValue

import examples.agents  # registers support_triage, which the webhook route starts
from examples.web import (
    LIVE_KEEPALIVE_SECONDS,
    LIVE_TIMEOUT_SECONDS,
    json_body,
    status_for,
    webhook_receiver,
)
from runner import Engine, Run, RunwrightError, default_engine
from runner.console.abilities import Ability
from runner.console.assets import PAGE_HEADERS
from runner.console.flask import console_blueprint, csrf_token, csrf_valid
from runner.console.render import e, hidden, page
from runner.console.sessions import Session
from runner.console.signin import SignedIn, SignIn, local_next
from runner.sse import flask_response
from runner.webhooks.flask import webhook_blueprint

CONSOLE = "/console"
# The field of Flask's session that holds the console's signed session.
SESSION_KEY = "console_session"


def run_json(run: Run) -> dict[str, Any]:
    """The run as JSON: what anyone may see (the console shows the rest)."""
    waiting = run.waiting
    return {
        "run_id": run.id,
        "agent": run.agent,
        "status": run.status.value,
        "output": run.output,
        "error": None
        if run.error is None
        else {"code": run.error.code, "message": run.error.message},
        "waiting": None
        if waiting is None
        else {"tool_name": waiting.tool_name, "expires_at": waiting.expires_at.isoformat()},
    }


def login_page(next_path: str, problem: str = "") -> str:
    """The sign-in form, in the console's look (served with its headers)."""
    body = (
        "<h1>Sign in</h1>"
        + (f'<p class="problem">{e(problem)}</p>' if problem else "")
        + '<form method="post" action="/login">'
        + hidden("csrf_token", csrf_token())
        + hidden("next", next_path)
        + '<p><label>Name<br><input name="name" autocomplete="username" required></label></p>'
        + '<p><label>Password<br><input name="password" type="password" '
        + 'autocomplete="current-password" required></label></p>'
        + '<p><button type="submit">Sign in</button></p></form>'
    )
    return page("Sign in", body, base=None, user=None)


def create_app(engine: Engine | None = None) -> Flask:
    """The app; ``engine=None`` uses the process default (``Engine.from_env()``)
    when the first request needs it."""
    app = Flask(__name__)
    # The console keeps its CSRF token in Flask's session: set FLASK_SECRET_KEY
    # (one value for every process); without it each process makes its own.
    secret_key = os.environ.get("FLASK_SECRET_KEY") or secrets.token_hex(32)
    app.secret_key = secret_key
    app.config.update(
        LIVE_KEEPALIVE_SECONDS=LIVE_KEEPALIVE_SECONDS,
        LIVE_TIMEOUT_SECONDS=LIVE_TIMEOUT_SECONDS,
        SESSION_COOKIE_SAMESITE="Lax",
        SESSION_COOKIE_HTTPONLY=True,
    )

    users = os.environ.get("EXAMPLE_CONSOLE_USERS")
    # The console's own sign-in rules (runner.console.signin), and its sessions.
    sign_in = SignIn(users, secret_key=secret_key) if users else None

    def runwright() -> Engine:
        return engine if engine is not None else default_engine()

    def current() -> Session | None:
        """The session ``/login`` made, while it lasts."""
        value = session.get(SESSION_KEY)
        if sign_in is None or not isinstance(value, str):
            return None
        return sign_in.session([value])

    def signed_in(flask_request: Any) -> str | None:
        """The console's guard: the signed-in user, or None."""
        found = current()
        return None if found is None else found.user

    def abilities(flask_request: Any) -> frozenset[Ability]:
        """What the signed-in account's role in the accounts file lets it do
        (docs/security.md, "Roles")."""
        found = current()
        accounts = None if sign_in is None else sign_in.accounts()
        if found is None or accounts is None:
            return frozenset()
        return accounts.abilities(found.user)

    app.register_blueprint(
        console_blueprint(runwright, guard=signed_in, abilities=abilities, login_url="/login"),
        url_prefix=CONSOLE,
    )
    # Signed deliveries to /hooks/tickets start runs (examples/web.py).
    receiver = webhook_receiver(runwright, examples.agents.AGENT)
    app.register_blueprint(webhook_blueprint(receiver), url_prefix="/hooks")

    @app.errorhandler(RunwrightError)
    def refuse(exc: RunwrightError) -> ResponseReturnValue:
        # Anything the engine refuses is one clear answer, never a 500.
        return jsonify(error=exc.message), status_for(exc)

    @app.post("/runs")
    def start() -> ResponseReturnValue:
        # JSON only: another site's HTML form can post text/plain or a form
        # without a preflight, but JSON only with this site's consent (CORS).
        if request.mimetype != "application/json":
            return jsonify(error="POST /runs takes application/json"), 415
        body = json_body(request.get_data())
        if not isinstance(body, dict):
            return jsonify(error="the body must be a JSON object"), 400
        agent, payload, run_id = body.get("agent"), body.get("payload", {}), body.get("id")
        if not isinstance(agent, str):
            return jsonify(error='"agent" must be an agent name'), 400
        if not isinstance(payload, dict):
            return jsonify(error='"payload" must be a JSON object'), 400
        if run_id is not None and not isinstance(run_id, str):
            return jsonify(error='"id" must be a string'), 400
        # Idempotent on id: a client that retries the POST gets the same run.
        run = runwright().start(agent, payload, source="flask", trigger="POST /runs", id=run_id)
        return jsonify(run_id=run.id, status=run.status.value), 201

    @app.get("/runs/<run_id>")
    def show(run_id: str) -> ResponseReturnValue:
        return jsonify(run_json(runwright().get_run(run_id)))

    @app.get("/runs/<run_id>/events")
    def events(run_id: str) -> ResponseReturnValue:
        return flask_response(
            runwright(),
            run_id,
            timeout=app.config["LIVE_TIMEOUT_SECONDS"],
            keepalive=app.config["LIVE_KEEPALIVE_SECONDS"],
        )

    @app.get("/login")
    def login_form() -> ResponseReturnValue:
        return login_page(local_next(request.args.get("next"), CONSOLE)), 200, PAGE_HEADERS

    @app.post("/login")
    def login() -> ResponseReturnValue:
        target = local_next(request.form.get("next"), CONSOLE)
        if not csrf_valid(request.form.get("csrf_token")):
            stale = login_page(target, "The form was stale: try again.")
            return stale, 403, PAGE_HEADERS
        if sign_in is None:
            message = "No accounts: set EXAMPLE_CONSOLE_USERS (see this app's docstring)."
            return login_page(target, message), 503, PAGE_HEADERS
        name, password = request.form.get("name", ""), request.form.get("password", "")
        outcome = sign_in.attempt(name, password, request.remote_addr or "")
        if not isinstance(outcome, SignedIn):
            headers = dict(PAGE_HEADERS)
            if outcome.retry_after is not None:
                headers["Retry-After"] = str(outcome.retry_after)
            return login_page(target, outcome.message), outcome.status, headers
        session.clear()  # a new session (and CSRF token) for the signed-in user
        session[SESSION_KEY] = outcome.value
        return redirect(target, 303)

    @app.post("/logout")
    def logout() -> ResponseReturnValue:
        if csrf_valid(request.form.get("csrf_token")):
            found = current()
            if sign_in is not None and found is not None:
                sign_in.end(found)  # a copy of the cookie is signed out too
            session.clear()
        return redirect("/login", 303)

    return app
