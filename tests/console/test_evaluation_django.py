"""The evaluations' pages through the Django adapter: routed in the
console's namespace, open to staff with ``view_run``, their payloads masked
without ``view_payloads`` (no view recorded) and shown with it (one
``viewed_payloads`` entry); an unknown id is a 404."""

from __future__ import annotations

import pytest

from runner import Engine
from runner.console.masking import MASK
from tests.console.django_support import BASE, client_of, make_user, page, text
from tests.console.test_evaluation_pages import SECRET, payload_views, two_evaluations


@pytest.fixture
def console(django_console: Engine) -> Engine:
    return django_console


def test_the_evaluations_pages_under_django_by_permission(console: Engine) -> None:
    from django.urls import reverse

    pair = two_evaluations(console)
    compared = reverse("runwright_console:comparison", args=[pair.new, pair.baseline])
    assert compared == f"{BASE}/evaluations/{pair.new}/compare/{pair.baseline}"

    viewer = client_of(make_user(permissions=("view_run",)))
    listing = page(viewer, f"{BASE}/evaluations")
    assert pair.new in listing and f'href="{compared}"' in listing
    for path in (f"{BASE}/evaluations/{pair.new}", compared, f"{BASE}/api{compared[len(BASE) :]}"):
        shown = page(viewer, path)
        assert MASK in shown and SECRET not in shown, path
    assert payload_views(console) == []
    missing = viewer.get(f"{BASE}/evaluations/no-such-evaluation")
    assert missing.status_code == 404 and "no evaluation with id" in text(missing)

    reader = client_of(make_user(permissions=("view_run", "view_payloads")))
    assert f"{SECRET}3" in page(reader, compared)
    assert payload_views(console) == [{"evaluation": pair.new, "against": pair.baseline}]

    nobody = client_of(make_user(permissions=()))
    refused = nobody.get(f"{BASE}/api/evaluations/{pair.new}")
    assert refused.status_code == 403 and SECRET not in text(refused)
