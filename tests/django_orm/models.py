from __future__ import annotations

from django.db import models


class Product(models.Model):
    """A row of ``orm_products``, which the test makes (tests/e2e/test_app_databases.py)."""

    sku = models.CharField(max_length=40, unique=True)
    name = models.CharField(max_length=200)

    class Meta:
        db_table = "orm_products"
