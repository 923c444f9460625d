"""A project that mounts the console elsewhere, in a namespace of its own."""

from __future__ import annotations

from django.urls import include, path

urlpatterns = [path("ops/runwright/", include("runner.console.django.urls", namespace="ops"))]
