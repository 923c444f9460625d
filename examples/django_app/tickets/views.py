"""Open a ticket and triage it with an agent; decide the agent's approvals.

Start a worker with ``RUNWRIGHT_AGENTS=examples.agents`` and
``EXAMPLE_BASE_URL=http://localhost:8000`` so the notifier's links point here.

``/runs/<id>/live`` follows a run in a browser, fed by the Server-Sent Events
of ``/runs/<id>/events`` (serve it from WSGI with threads: each open stream
holds one).

Bad input of any kind (a form that is not UTF-8, a title with control
characters, a malformed id or token, a reason the engine refuses) is a 400 with
one clear error and writes nothing, never a 500.
"""

from __future__ import annotations

import json
import unicodedata

from django.conf import settings
from django.db import transaction
from django.http import HttpRequest, HttpResponse, HttpResponseBase, JsonResponse
from django.shortcuts import get_object_or_404
from django.template import engines
from django.views.decorators.csrf import csrf_exempt
from django.views.decorators.http import require_http_methods, require_POST

from examples.agents import AGENT
from examples.django_app.tickets.models import Ticket
from examples.web import (
    LIVE_HEADERS,
    LIVE_KEEPALIVE_SECONDS,
    LIVE_TIMEOUT_SECONDS,
    check_form,
    live_page,
    public_event,
    status_for,
)
from runner import InvalidInput, RunwrightError, default_engine, start_run
from runner.sse import django_response

TITLE_CHARS = 200  # Ticket.title's max_length, which SQLite does not enforce

# Django templates autoescape: the tool input was written by a model.
APPROVAL_PAGE = engines["django"].from_string("""<!doctype html>
<title>Approve {{ approval.tool_name }}?</title>
<h1>{{ approval.tool_name }}</h1>
<p>Run {{ approval.run_id }} asks to call <b>{{ approval.tool_name }}</b> with:</p>
<pre>{{ input_json }}</pre>
{% if approval.decision %}
<p>Already {{ approval.decision.value }}.</p>
{% if approval.reason %}<p>Reason: {{ approval.reason }}</p>{% endif %}
{% else %}
<p>Expires at {{ approval.expires_at|date:"c" }}.</p>
<form method="post" action="{{ action }}">
  <input type="hidden" name="token" value="{{ token }}">
  <label>Reason <textarea name="reason" maxlength="2000"></textarea></label>
  <button name="decision" value="approve">Approve</button>
  <button name="decision" value="deny">Deny</button>
</form>
{% endif %}
""")

RESULT_PAGE = engines["django"].from_string("""<!doctype html>
<title>{{ title }}</title>
<h1>{{ title }}</h1>
<p>{{ message }}</p>
""")


def start_triage(ticket_id: int, title: str) -> None:
    """Runs after the commit: the ticket exists, so a worker may look it up."""
    run = start_run(
        AGENT,
        {"ticket_id": ticket_id, "message": title},
        source="django",
        trigger="ticket.created",
        id=f"ticket-{ticket_id}",  # idempotent: starting it again returns the same run
    )
    Ticket.objects.filter(pk=ticket_id).update(run_id=run.id)


def open_ticket(title: str) -> Ticket:
    """Save a ticket and start its triage once the current transaction commits.

    If the transaction rolls back, the ticket is gone and no run ever starts:
    starting it right away could have a worker triage a ticket that never existed.
    """
    ticket = Ticket.objects.create(title=title)
    # robust: if Runwright is unreachable, the committed ticket still gets its 201
    # (the error is logged, run_id stays empty and the run can be started later).
    transaction.on_commit(lambda: start_triage(ticket.pk, ticket.title), robust=True)
    return ticket


def ticket_json(ticket: Ticket) -> dict[str, object]:
    return {"ticket_id": ticket.pk, "title": ticket.title}


def check_title(title: str) -> str:
    """A one-line title the run's trigger can carry, or InvalidInput."""
    if not title:
        raise InvalidInput("a ticket needs a title")
    if len(title) > TITLE_CHARS:
        raise InvalidInput(f"a title has at most {TITLE_CHARS} characters")
    if any(unicodedata.category(char) == "Cc" for char in title):
        raise InvalidInput("a title cannot hold control characters")
    return title


@require_POST
def create_ticket(request: HttpRequest) -> HttpResponse:
    try:
        check_form(request.content_type, request.body)
        title = check_title(request.POST.get("title", "").strip())
    except InvalidInput as exc:
        return JsonResponse({"error": exc.message}, status=400)
    ticket = open_ticket(title)
    return JsonResponse(ticket_json(ticket), status=201)


@require_http_methods(["GET"])
def show_ticket(request: HttpRequest, ticket_id: int) -> HttpResponse:
    ticket = get_object_or_404(Ticket, pk=ticket_id)
    body: dict[str, object] = {**ticket_json(ticket), "run_id": ticket.run_id or None}
    if ticket.run_id:
        try:
            run = default_engine().get_run(ticket.run_id)
        except RunwrightError as exc:
            return JsonResponse({"error": exc.message}, status=status_for(exc))
        body.update(status=run.status.value, output=run.output)
    return JsonResponse(body)


def page(title: str, message: str, status: int) -> HttpResponse:
    return HttpResponse(RESULT_PAGE.render({"title": title, "message": message}), status=status)


# No CSRF token: the form carries the approval's own token instead, a secret that
# a forging site cannot know, and approvers often open the link from an email
# without a session here. The token protects the POST the way CSRF would.
@csrf_exempt
@require_http_methods(["GET", "POST"])
def approval(request: HttpRequest, approval_id: str) -> HttpResponse:
    engine = default_engine()
    if request.method == "POST":
        try:
            check_form(request.content_type, request.body)
        except InvalidInput as exc:
            return page("Not decided", exc.message, 400)
        decision = request.POST.get("decision")
        if decision not in ("approve", "deny"):
            return page("Not decided", "decision must be approve or deny", 400)
        try:
            run = engine.respond(
                approval_id,
                decision == "approve",
                request.POST.get("reason") or None,
                token=request.POST.get("token", ""),
            )
        except RunwrightError as exc:
            return page("Not decided", exc.message, status_for(exc, missing=400))
        done = "Approved" if decision == "approve" else "Denied"
        return page(done, f"Run {run.id} is now {run.status.value}.", 200)

    token = request.GET.get("token", "")
    try:
        # The page shows the tool input, so only the token's holder may see it.
        found = engine.check_token(approval_id, token)
    except RunwrightError as exc:
        return page("Cannot show this approval", exc.message, status_for(exc, missing=400))
    context = {
        "approval": found,
        "token": token,
        "action": request.path,
        "input_json": json.dumps(found.input, indent=2, ensure_ascii=False),
    }
    return HttpResponse(APPROVAL_PAGE.render(context))


# Neither view touches Django's database: no transaction around the stream.
@transaction.non_atomic_requests
@require_http_methods(["GET"])
def run_events(request: HttpRequest, run_id: str) -> HttpResponseBase:
    try:
        response: HttpResponseBase = django_response(
            request,
            default_engine(),
            run_id,
            shape=public_event,
            timeout=getattr(settings, "LIVE_TIMEOUT_SECONDS", LIVE_TIMEOUT_SECONDS),
            keepalive=getattr(settings, "LIVE_KEEPALIVE_SECONDS", LIVE_KEEPALIVE_SECONDS),
        )
    except RunwrightError as exc:
        return JsonResponse({"error": exc.message}, status=status_for(exc))
    return response


@transaction.non_atomic_requests
@require_http_methods(["GET"])
def live(request: HttpRequest, run_id: str) -> HttpResponse:
    try:
        run = default_engine().get_run(run_id)
    except RunwrightError as exc:
        return JsonResponse({"error": exc.message}, status=status_for(exc))
    return HttpResponse(live_page(run), headers=LIVE_HEADERS)
