"""HTML pieces of the console, written by hand and escaped at each value.

Every value that came from a run (a trigger payload, model text, tool
arguments and results, error messages, even ids and agent names) goes through
:func:`e` or :func:`json_block`; there is no template engine whose escaping
could be switched off.
"""

from __future__ import annotations

import html
import json
import math
from collections.abc import Iterable, Mapping
from datetime import UTC, datetime
from typing import Any
from urllib.parse import urlencode

import runner
from runner.console.assets import SCRIPT, STYLE
from store.models import Run

# JSON longer than this (characters or lines) is collapsed in a <details>.
LONG_CHARS = 400
LONG_LINES = 12
# Nothing is shown past this many characters: a tool that returned a
# megabyte must not make the page a megabyte.
CLIP_CHARS = 100_000


def e(value: object) -> str:
    """``value`` as HTML text, safe in element content and quoted attributes."""
    return html.escape(str(value), quote=True)


def json_text(value: Any) -> str:
    if isinstance(value, str):
        return value
    try:
        return json.dumps(value, indent=2, ensure_ascii=False, default=str)
    except (TypeError, ValueError):  # a cycle, or a float the encoder refuses
        return repr(value)


def _clip(text: str) -> str:
    if len(text) <= CLIP_CHARS:
        return text
    return text[:CLIP_CHARS] + f"\n… ({len(text) - CLIP_CHARS} more characters not shown)"


def json_block(value: Any, label: str = "", *, css: str = "json") -> str:
    """``value`` pretty-printed (a string as it is), collapsed when long."""
    text = json_text(value)
    pre = f'<pre class="{css}">{e(_clip(text))}</pre>'
    if len(text) <= LONG_CHARS and text.count("\n") < LONG_LINES:
        return pre
    summary = f"{label}: " if label else ""
    return f"<details><summary>{e(summary)}{len(text)} characters</summary>{pre}</details>"


def text_block(text: str) -> str:
    """Model text: kept as written (line breaks and all), collapsed when long."""
    return json_block(text, "text", css="text")


def parsed(raw: Any) -> Any:
    """Tool-call arguments and tool results arrive as JSON text (or not JSON
    at all, when a model wrote it badly): the value when it parses, else the text."""
    if not isinstance(raw, str):
        return raw
    try:
        return json.loads(raw)
    except ValueError:
        return raw


def when(value: datetime | None) -> str:
    if value is None:
        return "—"
    utc = value.astimezone(UTC)
    return f'<time datetime="{e(utc.isoformat())}">{utc:%Y-%m-%d %H:%M:%S} UTC</time>'


def took(start: datetime | None, end: datetime | None) -> str:
    if start is None or end is None:
        return ""
    seconds = (end - start).total_seconds()
    return f"{seconds * 1000:.0f} ms" if seconds < 10 else f"{seconds:.1f} s"


def expires(at: datetime, now: datetime) -> str:
    """The expiry as text now; the page's script counts it down."""
    left = (at - now).total_seconds()
    words = "expired" if left <= 0 else f"expires in {_span(left)}"
    iso = at.astimezone(UTC).isoformat()
    return f'<span class="expires" data-expires="{e(iso)}" title="{e(iso)}">{words}</span>'


def _span(seconds: float) -> str:
    minutes = int(seconds // 60)
    if minutes < 1:
        return f"{math.ceil(seconds)} s"
    if minutes < 120:
        return f"{minutes} min"
    hours = minutes // 60
    return f"{hours} h {minutes % 60} min" if hours < 48 else f"{hours // 24} days"


def status_badge(status: str, *, id: str | None = None) -> str:
    ident = f' id="{e(id)}"' if id else ""
    return f'<span{ident} class="st st-{e(status)}">{e(status)}</span>'


def parked(run: Run) -> str:
    """The badge of a run parked on a limit: its key, and when it may go."""
    if run.parked_key is None or run.parked_until is None:
        return ""
    until = run.parked_until.astimezone(UTC)
    title = f"waiting: rate_limit on {run.parked_key}, may go at {until:%Y-%m-%d %H:%M:%S} UTC"
    return (
        f' <span class="st st-parked" title="{e(title)}">parked on {e(run.parked_key)} '
        f"until {until:%H:%M:%S} UTC</span>"
    )


def attention(run: Run) -> str:
    """The badge of a run with an effect of unknown outcome nobody resolved."""
    if not run.needs_attention:
        return ""
    return (
        ' <span class="st st-attention" title="an effect of unknown outcome">needs attention</span>'
    )


def url(base: str, path: str, query: Mapping[str, str | None] | None = None) -> str:
    """A console URL; ``query`` values of None or "" are left out."""
    kept = {k: v for k, v in (query or {}).items() if v}
    return base + path + (("?" + urlencode(kept)) if kept else "")


def facts(rows: Iterable[tuple[str, str]]) -> str:
    """A definition list; the values are HTML already (escape them first)."""
    items = "".join(f"<dt>{e(name)}</dt><dd>{value}</dd>" for name, value in rows)
    return f'<dl class="facts">{items}</dl>'


def hidden(name: str, value: str) -> str:
    return f'<input type="hidden" name="{e(name)}" value="{e(value)}">'


def json_field(name: str, text: str, *, ident: str, label: str, want_object: bool) -> str:
    """A box of JSON a person writes (edited arguments, an answer), which
    the page's script checks before the form is sent (``data-json``: JSON,
    or a JSON object) and says why next to it; the server checks it again."""
    problem = f"{ident}-problem"
    rows = min(max(text.count("\n") + 2, 4), 24)
    return (
        f'<label for="{e(ident)}">{e(label)}</label><br>'
        f'<textarea class="json" id="{e(ident)}" name="{e(name)}" rows="{rows}" spellcheck="false"'
        f' data-json="{"object" if want_object else "any"}" aria-describedby="{e(problem)}">'
        # The parser drops one newline right after <textarea>: this one, so
        # that the text is kept as it is.
        f'\n{e(text)}</textarea><p class="invalid" id="{e(problem)}" hidden></p>'
    )


def sign_out_form(action: str, field: str, token: str) -> str:
    """The header's sign-out button, for a console that signs its users in itself."""
    return (
        f'<form class="signout" method="post" action="{e(action)}">{hidden(field, token)}'
        '<button type="submit">Sign out</button></form>'
    )


def page(title: str, body: str, *, base: str | None, user: str | None, sign_out: str = "") -> str:
    """A whole page. ``base`` None: a page outside the console (an approval
    link), which shows no navigation. ``sign_out``: :func:`sign_out_form`'s
    HTML, shown after the user's name."""
    nav = ""
    if base is not None:
        who = f'<span class="user">{e(user)}</span>' if user else ""
        nav = (
            f'<header class="top"><a href="{e(base)}/">Runs</a>'
            f'<a href="{e(base)}/approvals">Approvals</a>'
            f'<a href="{e(base)}/schedules">Schedules</a>'
            f'<a href="{e(base)}/threads">Threads</a>'
            f'<a href="{e(base)}/evaluations">Evaluations</a>{who}{sign_out}</header>'
        )
    return (
        "<!doctype html>\n<html lang=en><head><meta charset=utf-8>"
        '<meta name="viewport" content="width=device-width, initial-scale=1">'
        f"<title>{e(title)}</title><style>{STYLE}</style></head>\n"
        f"<body>{nav}<main>\n{body}\n{_footer(base)}</main>"
        f"<script>{SCRIPT}</script></body></html>\n"
    )


def _footer(base: str | None) -> str:
    """Runwright's version, for the people signed in to the console; a page
    shown to anyone else (a sign-in page, an approval's link) keeps it to itself."""
    if base is None:
        return ""
    return f'<footer class="meta">Runwright {e(runner.__version__)}</footer>'


def message_page(
    title: str, message: str, *, base: str | None, user: str | None, sign_out: str = ""
) -> str:
    body = f"<h1>{e(title)}</h1><p>{e(message)}</p>"
    return page(title, body, base=base, user=user, sign_out=sign_out)
