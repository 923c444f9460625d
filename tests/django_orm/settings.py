"""Settings of the test's Django project: one app (this package, whose model
is ``Product``) on the test's own database, reached under the application
name ``APPLICATION_NAME`` so that a test can find, and terminate, the
connections Django opened (Runwright's own are named ``runwright``).

``RUNWRIGHT_TEST_CONN_MAX_AGE`` (seconds, or ``none`` for unlimited) and
``RUNWRIGHT_TEST_CONN_HEALTH_CHECKS`` (``1``) set ``CONN_MAX_AGE`` and
``CONN_HEALTH_CHECKS``; by default Django's own (0, off).
``RUNWRIGHT_TEST_DJANGO_TEST_NAME`` names the database Django's test runner
uses (pytest-django's, in tests/e2e/test_pytest_django_recipe.py).
"""

from __future__ import annotations

import os

from sqlalchemy.engine import make_url

APPLICATION_NAME = "django-orm-tools"

_url = make_url(os.environ["RUNWRIGHT_DATABASE_URL"])
_max_age = os.environ.get("RUNWRIGHT_TEST_CONN_MAX_AGE", "0")

SECRET_KEY = "test-only-not-a-secret"
USE_TZ = True
INSTALLED_APPS = ["tests.django_orm"]
DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"
DATABASES = {
    "default": {
        "ENGINE": "django.db.backends.postgresql",
        "NAME": _url.database,
        "USER": _url.username or "",
        "PASSWORD": _url.password or "",
        "HOST": _url.host or "",
        "PORT": _url.port or "",
        "OPTIONS": {"application_name": APPLICATION_NAME},
        "CONN_MAX_AGE": None if _max_age == "none" else int(_max_age),
        "CONN_HEALTH_CHECKS": os.environ.get("RUNWRIGHT_TEST_CONN_HEALTH_CHECKS") == "1",
        "TEST": {"NAME": os.environ.get("RUNWRIGHT_TEST_DJANGO_TEST_NAME")},
    }
}
