"""Agents whose tool and notifier read a Django model (``tests.django_orm``),
for the workers of tests/e2e/test_app_databases.py. The module sets Django
up, as any program that uses the ORM outside ``manage.py`` does.

``orm_lookup`` calls ``product`` once, with the payload's ``sku``, and ends
with a text; ``orm_notified`` asks a person first, and its notifier reads the
product too, writing what it found (or the error it met) to the effect log.
"""

from __future__ import annotations

import os

import django

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "tests.django_orm.settings")
django.setup()

from runner import Agent, ApprovalRequest, tool  # noqa: E402
from runner.testing import Reply, Request, ScriptedModel, call, text, tools  # noqa: E402
from tests.agents import log_effect  # noqa: E402
from tests.django_orm.models import Product  # noqa: E402


@tool
def product(sku: str) -> str:
    """The name of the product with this SKU."""
    name: str = Product.objects.get(sku=sku).name
    return name


def look_up_once(request: Request) -> Reply:
    if request.step == 1:
        return tools(call("product", {"sku": request.payload["sku"]}))
    return text("looked up")


def notify(request: ApprovalRequest) -> None:
    sku = request.input["sku"]
    try:
        log_effect("notifier", run_id=request.run_id, product=Product.objects.get(sku=sku).name)
    except Exception as exc:
        log_effect("notifier", run_id=request.run_id, error=f"{type(exc).__name__}: {exc}")


Agent(name="orm_lookup", model=ScriptedModel("orm_lookup", look_up_once).model, tools=[product])
Agent(
    name="orm_notified",
    model=ScriptedModel("orm_notified", look_up_once).model,
    tools=[product],
    approvals={"product": True},
    notifier=notify,
)
