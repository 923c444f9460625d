"""A Flask app that starts Runwright runs and lets a person decide approvals.

Run it (with a worker started with ``RUNWRIGHT_AGENTS=examples.agents``)::

    flask --app examples.flask_app.app:create_app run

    curl -X POST localhost:5000/runs -H 'content-type: application/json' \\
         -d '{"agent": "support_triage", "payload": {"message": "A-1001 arrived broken"}}'

The notifier puts the approval link in the example inbox (see
``examples.agents``); open it to approve or deny the refund. ``GET /runs/<id>``
shows what a waiting run asks for only with that link's ``?token=``.
``GET /runs/<id>/live`` follows the run in a browser, fed by the Server-Sent
Events of ``GET /runs/<id>/events`` (serve it with threads: each open stream
holds one; ``flask run`` does).

Bad input of any kind (not UTF-8, not JSON, too deep, too large, an unknown
agent, a malformed id or token) is a 400 with one clear error, never a 500.
"""

from __future__ import annotations

import json
from typing import Any

from flask import Flask, jsonify, render_template_string, request
from flask.typing import ResponseReturnValue

import examples.agents  # noqa: F401  (registers support_triage)
from examples.web import (
    LIVE_HEADERS,
    LIVE_KEEPALIVE_SECONDS,
    LIVE_TIMEOUT_SECONDS,
    check_form,
    json_body,
    live_page,
    public_event,
    status_for,
)
from runner import Engine, InvalidInput, Run, RunwrightError, default_engine
from runner.sse import flask_response

# render_template_string autoescapes: tool input written by a model is untrusted.
APPROVAL_PAGE = """<!doctype html>
<title>Approve {{ approval.tool_name }}?</title>
<h1>{{ approval.tool_name }}</h1>
<p>Run {{ approval.run_id }} asks to call <b>{{ approval.tool_name }}</b> with:</p>
<pre>{{ input_json }}</pre>
{% if approval.decision %}
<p>Already {{ approval.decision.value }}.</p>
{% if approval.reason %}<p>Reason: {{ approval.reason }}</p>{% endif %}
{% else %}
<p>Expires at {{ approval.expires_at.isoformat() }}.</p>
<form method="post" action="{{ request.path }}">
  <input type="hidden" name="token" value="{{ token }}">
  <label>Reason <textarea name="reason" maxlength="2000"></textarea></label>
  <button name="decision" value="approve">Approve</button>
  <button name="decision" value="deny">Deny</button>
</form>
{% endif %}
"""

RESULT_PAGE = """<!doctype html>
<title>{{ title }}</title>
<h1>{{ title }}</h1>
<p>{{ message }}</p>
"""


def run_json(run: Run, *, approver: bool = False) -> dict[str, Any]:
    """The run as JSON. What a waiting run asks for (the tool input and the
    approval id) is shown only to an ``approver``: the holder of its token."""
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
        else {
            "tool_name": waiting.tool_name,
            "expires_at": waiting.expires_at.isoformat(),
            **({"approval_id": waiting.approval_id, "input": waiting.input} if approver else {}),
        },
    }


def result(title: str, message: str, status: int) -> ResponseReturnValue:
    return render_template_string(RESULT_PAGE, title=title, message=message), status


def create_app(engine: Engine | None = None) -> Flask:
    """The app; ``engine=None`` uses the process default (``Engine.from_env()``)
    when the first request needs it."""
    app = Flask(__name__)
    app.config.update(
        LIVE_KEEPALIVE_SECONDS=LIVE_KEEPALIVE_SECONDS, LIVE_TIMEOUT_SECONDS=LIVE_TIMEOUT_SECONDS
    )

    def runwright() -> Engine:
        return engine if engine is not None else default_engine()

    @app.errorhandler(RunwrightError)
    def refuse(exc: RunwrightError) -> ResponseReturnValue:
        # Anything the engine refuses is one clear answer, never a 500.
        return jsonify(error=exc.message), status_for(exc)

    @app.post("/runs")
    def start() -> ResponseReturnValue:
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
        run = runwright().get_run(run_id)
        token = request.args.get("token")
        approver = False
        if run.waiting is not None and token:
            try:
                runwright().check_token(run.waiting.approval_id, token)
                approver = True
            except RunwrightError:
                pass  # a wrong token sees what anyone sees
        return jsonify(run_json(run, approver=approver))

    @app.get("/runs/<run_id>/events")
    def events(run_id: str) -> ResponseReturnValue:
        return flask_response(
            runwright(),
            run_id,
            shape=public_event,
            timeout=app.config["LIVE_TIMEOUT_SECONDS"],
            keepalive=app.config["LIVE_KEEPALIVE_SECONDS"],
        )

    @app.get("/runs/<run_id>/live")
    def live(run_id: str) -> ResponseReturnValue:
        return live_page(runwright().get_run(run_id)), 200, LIVE_HEADERS

    @app.get("/approvals/<approval_id>")
    def approval_page(approval_id: str) -> ResponseReturnValue:
        token = request.args.get("token", "")
        try:
            # The page shows the tool input, so only the token's holder may see it.
            approval = runwright().check_token(approval_id, token)
        except RunwrightError as exc:
            return result("Cannot show this approval", exc.message, status_for(exc, missing=400))
        return render_template_string(
            APPROVAL_PAGE,
            approval=approval,
            token=token,
            input_json=json.dumps(approval.input, indent=2, ensure_ascii=False),
        )

    @app.post("/approvals/<approval_id>")
    def decide(approval_id: str) -> ResponseReturnValue:
        try:
            check_form(request.content_type, request.get_data())
        except InvalidInput as exc:
            return result("Not decided", exc.message, 400)
        decision = request.form.get("decision")
        if decision not in ("approve", "deny"):
            return result("Not decided", "decision must be approve or deny", 400)
        try:
            run = runwright().respond(
                approval_id,
                decision == "approve",
                request.form.get("reason") or None,
                token=request.form.get("token", ""),
            )
        except RunwrightError as exc:
            return result("Not decided", exc.message, status_for(exc, missing=400))
        done = "Approved" if decision == "approve" else "Denied"
        return result(done, f"Run {run.id} is now {run.status.value}.", 200)

    return app
