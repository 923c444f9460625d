from __future__ import annotations

from django.apps import AppConfig


class TicketsConfig(AppConfig):
    name = "examples.django_app.tickets"
    label = "tickets"
