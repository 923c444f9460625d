from __future__ import annotations

from django.contrib import admin
from django.urls import include, path

from examples import agents
from examples.django_app.tickets import views
from examples.web import webhook_receiver
from runner import default_engine
from runner.webhooks.django import webhook_urls

urlpatterns = [
    # A support tool's signed deliveries to /hooks/tickets start runs, one per
    # delivery (EXAMPLE_WEBHOOK_SECRET; examples/web.py, docs/triggers.md).
    path("hooks/", include(webhook_urls(webhook_receiver(default_engine, agents.AGENT)))),
    path("tickets/", views.create_ticket, name="create-ticket"),
    path("tickets/<int:ticket_id>/", views.show_ticket, name="ticket"),
    path("runs/<str:run_id>/events", views.run_events, name="run-events"),
    # Runs, their timelines and the approvals inbox, for staff; the notifier's
    # links (/console/approvals/<id>?token=...) open one approval for anyone.
    path("console/", include("runner.console.django.urls")),
    path("admin/", admin.site.urls),
]
