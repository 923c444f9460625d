"""The console's Django app: ``"runner.console.django"`` in ``INSTALLED_APPS``."""

from __future__ import annotations

from typing import Any

from django.apps import AppConfig
from django.core import checks

from runner.console.django.db import APP_LABEL


class ConsoleConfig(AppConfig):
    name = "runner.console.django"
    label = APP_LABEL
    verbose_name = "Runwright"

    def ready(self) -> None:
        checks.register(check_settings)


def check_settings(app_configs: Any = None, **kwargs: Any) -> list[checks.CheckMessage]:
    """What the console needs of the project: Django's auth, and an engine."""
    from django.apps import apps
    from django.conf import settings
    from django.contrib.auth.middleware import AuthenticationMiddleware
    from django.utils.module_loading import import_string

    from runner.console.django.views import ENGINE_SETTING, engine_factory

    found: list[checks.CheckMessage] = []
    if not apps.is_installed("django.contrib.auth"):
        found.append(
            checks.Error(
                "The Runwright console signs users in with django.contrib.auth.",
                hint="Add django.contrib.auth and django.contrib.contenttypes to INSTALLED_APPS.",
                id="runwright_console.E001",
            )
        )
    middleware = [import_string(path) for path in settings.MIDDLEWARE]
    if not any(isinstance(m, type) and issubclass(m, AuthenticationMiddleware) for m in middleware):
        found.append(
            checks.Error(
                "The Runwright console needs request.user.",
                hint="Add django.contrib.auth.middleware.AuthenticationMiddleware to MIDDLEWARE.",
                id="runwright_console.E002",
            )
        )
    try:
        engine_factory()
    except ImportError as exc:
        found.append(
            checks.Error(
                f"{ENGINE_SETTING} names nothing importable: {exc}",
                hint="Give the dotted path of a function that returns a runner.Engine.",
                id="runwright_console.E003",
            )
        )
    return found
