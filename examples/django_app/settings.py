"""Settings of the example Django project (``examples.django_app``).

Django keeps its own tables (tickets) in SQLite; Runwright keeps runs in its own
Postgres, configured by the ``RUNWRIGHT_*`` environment variables.
"""

from __future__ import annotations

import os
from pathlib import Path

BASE_DIR = Path(__file__).resolve().parent

SECRET_KEY = os.environ.get("DJANGO_SECRET_KEY", "example-only-not-a-secret")
# Off unless asked for (DJANGO_DEBUG=1): Django's debug 500 page shows settings
# and the server's environment, RUNWRIGHT_DATABASE_URL and its password included,
# to whoever made the request.
DEBUG = os.environ.get("DJANGO_DEBUG", "") == "1"
# With DEBUG off Django answers only these hosts; "testserver" is the test client.
ALLOWED_HOSTS = ["localhost", "127.0.0.1", "[::1]", "testserver"]

INSTALLED_APPS = ["examples.django_app.tickets"]
MIDDLEWARE = [
    "django.middleware.security.SecurityMiddleware",
    "django.middleware.common.CommonMiddleware",
    "django.middleware.csrf.CsrfViewMiddleware",
]
ROOT_URLCONF = "examples.django_app.urls"
TEMPLATES = [{"BACKEND": "django.template.backends.django.DjangoTemplates"}]

DATABASES = {
    "default": {
        "ENGINE": "django.db.backends.sqlite3",
        "NAME": os.environ.get("EXAMPLE_DJANGO_DB", str(BASE_DIR / "db.sqlite3")),
        # Each request is one transaction; start_run waits for its commit.
        "ATOMIC_REQUESTS": True,
    }
}
DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"
USE_TZ = True
