"""docs/django.md's way to test a tool that uses the ORM, run as a user runs
it: pytest with pytest-django (``--ds``) and the kit's ``runwright_engine``,
in a pytest of its own (Django is configured once per process). Marked
``transaction=True``, the test's row reaches the tool; with a plain
``django_db`` it does not, which is why the docs ask for the mark.

pytest-django keeps its test database here (``--reuse-db``): a fresh one
this test made, which it drops after; the kit clones its own databases.
"""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.services import ROOT, Services

USER_TESTS = '''
import pytest

from runner import Agent, tool
from runner.testing import ScriptedModel, call, text, tools
from tests.django_orm.models import Product


@tool
def product(sku: str) -> str:
    """The name of the product with this SKU."""
    return Product.objects.get(sku=sku).name


shop = Agent(name="shop", model="openai/gpt-4o-mini", tools=[product])


def look_up(runwright_engine, sku):
    model = ScriptedModel(f"shop-{sku}", [tools(call("product", {"sku": sku})), text("ok")])
    with shop.override(model=model):
        run = runwright_engine.run(shop)
    return runwright_engine.tool_calls(run.id)[0]


@pytest.mark.django_db(transaction=True)
def test_a_committed_row_reaches_the_tool(runwright_engine):
    Product.objects.create(sku="A1", name="anvil")
    assert look_up(runwright_engine, "A1").output == "anvil"


@pytest.mark.django_db
def test_a_row_in_the_tests_transaction_does_not(runwright_engine):
    Product.objects.create(sku="B2", name="bucket")
    assert "DoesNotExist" in look_up(runwright_engine, "B2").error
'''


@pytest.fixture
def django_test_database(services: Services) -> Iterator[str]:
    name = services.new_database(empty=True)
    yield name
    services.drop_database(name)


def test_the_docs_way_to_test_orm_tools_with_pytest_django(
    services: Services, django_test_database: str, tmp_path: Path
) -> None:
    (tmp_path / "test_shop.py").write_text(USER_TESTS)
    env = {
        **{k: v for k, v in os.environ.items() if not k.startswith(("RUNWRIGHT_", "DJANGO_"))},
        "PYTHONPATH": str(ROOT),
        "RUNWRIGHT_DATABASE_URL": services.database_url(django_test_database),
        "RUNWRIGHT_TEST_DJANGO_TEST_NAME": django_test_database,
        "RUNWRIGHT_TEST_DATABASE_URL": services.database_url("postgres"),
        "RUNWRIGHT_HOME": str(tmp_path / "home"),
        "LITELLM_LOCAL_MODEL_COST_MAP": "True",
    }
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "pytest",
            "-q",
            "-p",
            "no:cacheprovider",
            "--rootdir",
            str(tmp_path),
            "--ds=tests.django_orm.settings",
            "--reuse-db",
            "test_shop.py",
        ],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=240,
    )
    assert done.returncode == 0, done.stdout[-4000:] + done.stderr[-2000:]
    assert "2 passed" in done.stdout
