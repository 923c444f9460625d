"""An agent whose tool reads a Flask-SQLAlchemy model, for the workers of
tests/e2e/test_app_databases.py: the module builds the Flask app, as an
application's own module would, and tells Runwright of its ``db``.

``RUNWRIGHT_TEST_POOL_PRE_PING`` (``1``) turns SQLAlchemy's ``pool_pre_ping``
on. The app's connections are named ``APPLICATION_NAME``, so that a test can
find and terminate them.
"""

from __future__ import annotations

import os

from flask import Flask
from flask_sqlalchemy import SQLAlchemy
from sqlalchemy import String
from sqlalchemy.engine import make_url
from sqlalchemy.orm import DeclarativeBase, Mapped, mapped_column

from runner import Agent, tool
from runner.core.appdb import register_flask_sqlalchemy
from runner.testing import Reply, Request, ScriptedModel, call, text, tools

APPLICATION_NAME = "flask-orm-tools"


class Base(DeclarativeBase):
    pass


db = SQLAlchemy(model_class=Base)


class Product(db.Model):  # type: ignore[name-defined,misc]
    __tablename__ = "orm_products"
    id: Mapped[int] = mapped_column(primary_key=True)
    sku: Mapped[str] = mapped_column(String(40), unique=True)
    name: Mapped[str] = mapped_column(String(200))


app = Flask(__name__)
# psycopg2, Runwright's driver (SQLAlchemy 2.1 reads postgresql:// as psycopg 3).
app.config["SQLALCHEMY_DATABASE_URI"] = make_url(os.environ["RUNWRIGHT_DATABASE_URL"]).set(
    drivername="postgresql+psycopg2"
)
app.config["SQLALCHEMY_ENGINE_OPTIONS"] = {
    "connect_args": {"application_name": APPLICATION_NAME},
    "pool_pre_ping": os.environ.get("RUNWRIGHT_TEST_POOL_PRE_PING") == "1",
}
db.init_app(app)
register_flask_sqlalchemy(app, db)


@tool
def product(sku: str) -> str:
    """The name of the product with this SKU."""
    return db.session.execute(db.select(Product).filter_by(sku=sku)).scalar_one().name


def look_up_once(request: Request) -> Reply:
    if request.step == 1:
        return tools(call("product", {"sku": request.payload["sku"]}))
    return text("looked up")


Agent(
    name="flask_orm_lookup",
    model=ScriptedModel("flask_orm_lookup", look_up_once).model,
    tools=[product],
)
