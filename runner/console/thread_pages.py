"""The console's threads (docs/conversations.md): the list of recent threads,
and a thread read as a conversation, with a box to send it a message. Every
value is escaped: messages are text like any other."""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import Any

from runner.console.masking import mask
from runner.console.render import e, hidden, status_badge, when
from runner.core.engine.conversations import Thread
from store.models import ThreadSummary


def threads_body(threads: Sequence[ThreadSummary], *, base: str) -> str:
    if not threads:
        return "<h1>Threads</h1><p>No thread had a run in the last 30 days.</p>"
    rows = "".join(
        "<tr>"
        f'<td><a href="{e(base)}/threads/{e(t.thread)}">{e(t.thread)}</a></td>'
        f"<td>{e(t.agent)}</td><td>{status_badge(t.status.value)}</td>"
        f'<td>{when(t.last_at)}</td><td class="num">{t.runs}</td>'
        "</tr>"
        for t in threads
    )
    return (
        "<h1>Threads</h1><table><thead><tr><th>thread</th><th>agent</th>"
        "<th>latest run</th><th>last message</th><th>runs</th></tr></thead>"
        f"<tbody>{rows}</tbody></table>"
    )


def masked_messages(messages: Sequence[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """The messages' shape without their values (``runner.console.masking``)."""
    return [{k: (v if k == "role" else mask(v)) for k, v in m.items()} for m in messages]


def _content(message: Mapping[str, Any]) -> str:
    parts = []
    content = message.get("content")
    if isinstance(content, str) and content:
        parts.append(f'<div class="text">{e(content)}</div>')
    elif content:
        parts.append(f"<pre>{e(json.dumps(content, ensure_ascii=False, indent=2))}</pre>")
    for call in message.get("tool_calls") or ():
        function = call.get("function") if isinstance(call, Mapping) else None
        if isinstance(function, Mapping):
            parts.append(
                f'<div class="meta">calls <code>{e(function.get("name"))}</code> '
                f"<code>{e(function.get('arguments'))}</code></div>"
            )
    return "".join(parts) or '<span class="meta">(empty)</span>'


def thread_body(
    view: Thread, *, base: str, csrf: str, field: str, send: bool, note: str | None = None
) -> str:
    active = view.active
    runs = "".join(
        f'<li><a href="{e(base)}/runs/{e(r.id)}">{e(r.id)}</a> {e(r.agent)} '
        f"{status_badge(r.status.value)}</li>"
        for r in view.runs
    )
    said = "".join(
        f'<div class="msg msg-{e(m.get("role"))}"><span class="role">{e(m.get("role"))}</span>'
        f"{_content(m)}</div>"
        for m in view.messages
        if m.get("role") != "system"
    )
    form = ""
    if send and view.runs:
        agent = (active or view.runs[-1]).agent
        form = (
            f'<form method="post" action="{e(base)}/threads/{e(view.id)}">'
            f"{hidden(field, csrf)}{hidden('agent', agent)}"
            '<label for="message">Send a message</label>'
            '<textarea id="message" name="message" required maxlength="100000"></textarea>'
            '<button type="submit">Send</button></form>'
        )
    status = "idle" if active is None else f"run {e(active.id)} {e(active.status.value)}"
    return (
        (f'<p class="note">{note}</p>' if note else "")
        + f"<h1>Thread {e(view.id)}</h1><p>{status}</p>"
        + f'<div class="conversation">{said}</div>{form}'
        + f"<h2>Runs</h2><ol>{runs}</ol>"
    )


def thread_json(view: Thread, messages: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    """A thread as the console's JSON API answers it."""
    return {
        "thread": view.id,
        "status": view.status,
        "active": None if view.active is None else view.active.id,
        "runs": [
            {
                "id": r.id,
                "agent": r.agent,
                "status": r.status.value,
                "created_at": r.created_at.isoformat(),
            }
            for r in view.runs
        ],
        "messages": [dict(m) for m in messages if m.get("role") != "system"],
    }
