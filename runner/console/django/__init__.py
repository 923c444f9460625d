"""The console as a Django app, behind the project's own sign-in.

::

    # settings.py
    INSTALLED_APPS = [..., "django.contrib.auth", "django.contrib.contenttypes",
                      "django.contrib.sessions", "runner.console.django"]
    DATABASES["runwright"] = runwright_database(RUNWRIGHT_DATABASE_URL)
    DATABASE_ROUTERS = ["runner.console.django.db.RunwrightRouter"]

    # urls.py
    path("console/", include("runner.console.django.urls"))

Who may do what is Django's: active staff with the app's permissions
(``runwright_console.view_run``, ``view_approval``, ``decide_approval``,
``cancel_run``, ``retry_run``; superusers have all). Anyone else signed in
gets a 403, and nobody at all is sent to ``LOGIN_URL``; an approval link
(``approvals/<id>?token=...``) stays open to whoever holds its token. The
runs and approvals are listed read-only in the Django admin too.

This package imports Django, and only Django projects import it. Its
``__init__`` imports nothing, so that settings can import
:mod:`runner.console.django.db` before Django is set up.
"""
