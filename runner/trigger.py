"""The trigger envelope and how the model first sees it."""

from __future__ import annotations

import json

from store.models import Message, TriggerEnvelope


def render_trigger(envelope: TriggerEnvelope) -> str:
    """The first user message: ``source``, ``trigger`` and ``payload`` only, as a
    fenced JSON block with two-space indentation. ``id``, ``keys``, ``thread`` and
    ``received_at`` stay out of it; tools read them from ``ctx.trigger``."""
    body = {"source": envelope.source, "trigger": envelope.trigger, "payload": envelope.payload}
    return "```json\n" + json.dumps(body, indent=2, ensure_ascii=False) + "\n```"


def trigger_message(envelope: TriggerEnvelope) -> Message:
    return {"role": "user", "content": render_trigger(envelope)}


__all__ = ["TriggerEnvelope", "render_trigger", "trigger_message"]
