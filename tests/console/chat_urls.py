"""A project that mounts the chat stream's Django view (runner/chat/django.py)."""

from __future__ import annotations

from django.urls import path

from runner.chat.django import agui_view, stream_view

urlpatterns = [
    path("chat/threads/<str:thread>/stream", stream_view),
    path("chat/threads/<str:thread>/agui", agui_view),
]
