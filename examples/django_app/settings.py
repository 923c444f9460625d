"""Settings of the example Django project (``examples.django_app``).

Django keeps its own tables (tickets, users, sessions) in SQLite; Runwright
keeps runs in its own Postgres, configured by the ``RUNWRIGHT_*`` environment
variables. The console (``/console/``) signs staff in through the admin's
login page; Django reads Runwright's tables through the ``runwright`` alias
(for the admin's lists) and never migrates them.
"""

from __future__ import annotations

import os
from pathlib import Path

from runner.console.django.db import runwright_database
from runner.settings import Settings

BASE_DIR = Path(__file__).resolve().parent

SECRET_KEY = os.environ.get("DJANGO_SECRET_KEY", "example-only-not-a-secret")
# Off unless asked for (DJANGO_DEBUG=1): Django's debug 500 page shows settings
# and the server's environment, RUNWRIGHT_DATABASE_URL and its password included,
# to whoever made the request.
DEBUG = os.environ.get("DJANGO_DEBUG", "") == "1"
# With DEBUG off Django answers only these hosts; "testserver" is the test client.
ALLOWED_HOSTS = ["localhost", "127.0.0.1", "[::1]", "testserver"]

INSTALLED_APPS = [
    "django.contrib.admin",
    "django.contrib.auth",
    "django.contrib.contenttypes",
    "django.contrib.sessions",
    "django.contrib.messages",
    "runner.console.django",
    "examples.django_app.tickets",
]
MIDDLEWARE = [
    "django.middleware.security.SecurityMiddleware",
    "django.contrib.sessions.middleware.SessionMiddleware",
    "django.middleware.common.CommonMiddleware",
    "django.middleware.csrf.CsrfViewMiddleware",
    "django.contrib.auth.middleware.AuthenticationMiddleware",
    "django.contrib.messages.middleware.MessageMiddleware",
]
ROOT_URLCONF = "examples.django_app.urls"
TEMPLATES = [
    {
        "BACKEND": "django.template.backends.django.DjangoTemplates",
        "APP_DIRS": True,  # the admin's templates
        "OPTIONS": {
            "context_processors": [
                "django.template.context_processors.request",
                "django.contrib.auth.context_processors.auth",
                "django.contrib.messages.context_processors.messages",
            ]
        },
    }
]
# The console sends whoever is not signed in here (and back with ?next=).
LOGIN_URL = "admin:login"

DATABASES = {
    "default": {
        "ENGINE": "django.db.backends.sqlite3",
        "NAME": os.environ.get("EXAMPLE_DJANGO_DB", str(BASE_DIR / "db.sqlite3")),
        # Each request is one transaction; start_run waits for its commit.
        "ATOMIC_REQUESTS": True,
    }
}
# Runwright's Postgres, for the admin's read-only lists of runs and approvals.
_RUNWRIGHT_URL = Settings.from_env().database_url
if _RUNWRIGHT_URL:
    DATABASES["runwright"] = runwright_database(_RUNWRIGHT_URL)
DATABASE_ROUTERS = ["runner.console.django.db.RunwrightRouter"]
DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"
USE_TZ = True
# Django sets the process's time zone (TZ) from this; its default is Chicago's.
TIME_ZONE = "UTC"
