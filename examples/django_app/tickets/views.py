"""Open a ticket and triage it with an agent.

Start a worker with ``RUNWRIGHT_AGENTS=examples.agents`` and
``EXAMPLE_BASE_URL=http://localhost:8000`` so the notifier's links point at
this project's console (``/console/approvals/<id>?token=...``), where the
approver decides; staff sign in at ``/admin/`` and use the whole console.

``/runs/<id>/events`` streams a run's events as Server-Sent Events, for a
page of the app's own (serve it from WSGI with threads: each open stream
holds one).

Bad input of any kind (a form that is not UTF-8, a title with control
characters, a malformed id) is a 400 with one clear error and writes
nothing, never a 500.
"""

from __future__ import annotations

import unicodedata

from django.conf import settings
from django.db import transaction
from django.http import HttpRequest, HttpResponse, HttpResponseBase, JsonResponse
from django.shortcuts import get_object_or_404
from django.views.decorators.http import require_http_methods, require_POST

from examples.agents import AGENT
from examples.django_app.tickets.models import Ticket
from examples.web import (
    LIVE_KEEPALIVE_SECONDS,
    LIVE_TIMEOUT_SECONDS,
    check_form,
    status_for,
)
from runner import InvalidInput, RunwrightError, default_engine, start_run
from runner.sse import django_response

TITLE_CHARS = 200  # Ticket.title's max_length, which SQLite does not enforce


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


# The stream does not touch Django's database: no transaction around it.
@transaction.non_atomic_requests
@require_http_methods(["GET"])
def run_events(request: HttpRequest, run_id: str) -> HttpResponseBase:
    try:
        response: HttpResponseBase = django_response(
            request,
            default_engine(),
            run_id,
            timeout=getattr(settings, "LIVE_TIMEOUT_SECONDS", LIVE_TIMEOUT_SECONDS),
            keepalive=getattr(settings, "LIVE_KEEPALIVE_SECONDS", LIVE_KEEPALIVE_SECONDS),
        )
    except RunwrightError as exc:
        return JsonResponse({"error": exc.message}, status=status_for(exc))
    return response
