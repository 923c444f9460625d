from __future__ import annotations

from django.contrib import admin
from django.urls import include, path

from examples.django_app.tickets import views

urlpatterns = [
    path("tickets/", views.create_ticket, name="create-ticket"),
    path("tickets/<int:ticket_id>/", views.show_ticket, name="ticket"),
    path("runs/<str:run_id>/events", views.run_events, name="run-events"),
    # Runs, their timelines and the approvals inbox, for staff; the notifier's
    # links (/console/approvals/<id>?token=...) open one approval for anyone.
    path("console/", include("runner.console.django.urls")),
    path("admin/", admin.site.urls),
]
