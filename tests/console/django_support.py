"""The console mounted in the example Django project (configured once per
process by ``django_db`` in tests/conftest.py): its users, its clients, and
a test's Postgres as the project's ``runwright`` database.

Django is imported inside the functions: only once ``django_db`` has set it
up can its models be imported.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any
from urllib.parse import urlencode

from tests.console.conftest import csrf_of, unique

BASE = "/console"
LABEL = "runwright_console"
FORM = "application/x-www-form-urlencoded"
STAFF_PERMISSIONS = (
    "view_run",
    "view_approval",
    "decide_approval",
    "cancel_run",
    "retry_run",
    "resolve_effect",
    "view_payloads",
    "decide_runs",
)


def make_user(
    *,
    staff: bool = True,
    permissions: tuple[str, ...] = STAFF_PERMISSIONS,
    superuser: bool = False,
    password: str | None = None,
) -> Any:
    """A user of the project with ``permissions`` of the console's app."""
    from django.contrib.auth.models import Permission, User

    user = User.objects.create_user(
        unique("user"), password=password, is_staff=staff, is_superuser=superuser
    )
    granted = Permission.objects.filter(content_type__app_label=LABEL, codename__in=permissions)
    assert granted.count() == len(permissions), "a permission the app does not define"
    user.user_permissions.set(granted)
    return user


def delete_users() -> None:
    from django.contrib.auth.models import User

    User.objects.all().delete()


def client_of(user: Any | None = None) -> Any:
    """A client that sends CSRF tokens only when told to, signed in as ``user``."""
    from django.test import Client

    client = Client(enforce_csrf_checks=True)
    if user is not None:
        client.force_login(user)
    return client


def text(response: Any) -> str:
    if response.streaming:
        return b"".join(response.streaming_content).decode()
    body: str = response.content.decode()
    return body


def page(client: Any, path: str, status: int = 200) -> str:
    response = client.get(path)
    body = text(response)
    assert response.status_code == status, (response.status_code, body.split("<main>")[-1][:2000])
    return body


def send(client: Any, path: str, form: dict[str, str], **extra: Any) -> Any:
    """POST ``form`` URL-encoded, as a browser sends the console's forms
    (the console takes no other kind)."""
    return client.post(path, urlencode(form), content_type=FORM, **extra)


def post(client: Any, path: str, data: dict[str, str], *, csrf_from: str) -> Any:
    """POST a form carrying the CSRF token of the page at ``csrf_from``."""
    return send(client, path, {**data, "csrf_token": csrf_of(page(client, csrf_from))})


def cookie_token(client: Any) -> str:
    """This client's CSRF secret as its cookie holds it (Django takes it as a
    token too): for a user whom every console page refuses, so that what
    refuses their forms is not a missing token."""
    from django.conf import settings

    if settings.CSRF_COOKIE_NAME not in client.cookies:
        # A page with a form (the login's, or the index's logout): it sets one.
        assert client.get("/admin/login/", follow=True).status_code == 200
    return str(client.cookies[settings.CSRF_COOKIE_NAME].value)


def location(response: Any) -> str:
    return str(response.headers["Location"])


LOGIN = re.compile(r"^/admin/login/\?next=(.+)$")


@contextmanager
def runwright_database(url: str, alias: str = "runwright") -> Iterator[None]:
    """The project's ``runwright`` alias pointing at ``url`` (a test's own
    database) while the block runs. Django reads DATABASES once, so the
    connection handler's copy (the same dict) is changed, and the
    connection of this thread dropped on the way out."""
    from django.conf import settings
    from django.db import connections

    from runner.console.django.db import runwright_database as entry

    databases = settings.DATABASES
    before = databases.get(alias)
    if before is not None:
        # A connection this thread opened to what the alias named before
        # (RUNWRIGHT_DATABASE_URL's database) keeps its own settings: drop it.
        connections[alias].close()
        del connections[alias]
    databases[alias] = entry(url)
    connections.configure_settings(databases)
    try:
        yield
    finally:
        connections[alias].close()
        del connections[alias]
        if before is None:
            del databases[alias]
        else:
            databases[alias] = before
