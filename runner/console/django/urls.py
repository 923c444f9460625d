"""The console's URLs: ``path("console/", include("runner.console.django.urls"))``.

Each route of :data:`runner.console.ROUTES` under its own name, in the
``runwright_console`` namespace: ``reverse("runwright_console:run", args=[run_id])``.
"""

from __future__ import annotations

from runner.console.django.views import urlpatterns as _patterns

app_name = "runwright_console"
urlpatterns = _patterns()
