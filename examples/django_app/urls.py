from __future__ import annotations

from django.urls import path, re_path

from examples.django_app.tickets import views

urlpatterns = [
    path("tickets/", views.create_ticket, name="create-ticket"),
    path("tickets/<int:ticket_id>/", views.show_ticket, name="ticket"),
    path("runs/<str:run_id>/events", views.run_events, name="run-events"),
    path("runs/<str:run_id>/live", views.live, name="run-live"),
    # The trailing slash is optional so that the notifier's links
    # (/approvals/<id>?token=...) work here as in the Flask example.
    re_path(r"^approvals/(?P<approval_id>[^/]+)/?$", views.approval, name="approval"),
]
