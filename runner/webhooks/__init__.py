"""Webhooks: runs started by signed deliveries (docs/triggers.md).

``WebhookReceiver`` (``receiver.py``) verifies Standard Webhooks signatures
with the ``standardwebhooks`` package and starts one run per delivery; mount
its WSGI application, or its Flask (``flask.py``) or Django (``django.py``)
adapter, at a path of your choice.
"""

from __future__ import annotations

from runner.webhooks.receiver import Delivery, Mapped, WebhookReceiver, new_secret

__all__ = ["Delivery", "Mapped", "WebhookReceiver", "new_secret"]
