"""The WSGI plumbing of the standalone console: a request's path, query and
form decoded strictly, the console's routes matched, and a
:class:`~runner.console.views.Response` written out. No framework."""

from __future__ import annotations

import logging
import re
from collections.abc import Callable, Iterable, Mapping
from http import HTTPStatus
from typing import Any
from urllib.parse import parse_qsl, quote

from runner.console.forms import FormRefused, check_length, parse_form
from runner.console.views import ROUTES, Response, Route
from runner.core.errors import InvalidInput

log = logging.getLogger(__name__)

MAX_QUERY_FIELDS = 50
_PREFIX = re.compile(r"(/[A-Za-z0-9._~-]+)*")
_LOCATION_SAFE = "/?#&=%:+,;@!$'()*~"
# On every answer, redirects and streams included (pages add PAGE_HEADERS).
ALWAYS = {
    "X-Content-Type-Options": "nosniff",
    "Referrer-Policy": "no-referrer",
    "X-Frame-Options": "DENY",
}

StartResponse = Callable[..., Any]


def check_prefix(prefix: str) -> str:
    """The path the console is served under, as ``/console`` ("" for the
    root); a trailing slash is dropped. Only plain path characters."""
    prefix = prefix.strip().rstrip("/")
    dots = any(segment.strip(".") == "" for segment in prefix.split("/")[1:])
    if _PREFIX.fullmatch(prefix) is None or dots or len(prefix) > 200:
        raise InvalidInput("a prefix is a path like /console (letters, digits, . _ ~ -)")
    return prefix


class Router:
    """The console's routes as patterns: a ``<name>`` parameter matches one
    path segment."""

    def __init__(self, routes: Iterable[Route] = ROUTES) -> None:
        self._routes = [(route, _pattern(route.rule)) for route in routes]

    def match(self, method: str, path: str) -> tuple[Route, dict[str, str]] | list[str]:
        """The route for ``method`` on ``path`` (under the prefix) and its
        parameters; else the methods the path takes (empty: no such path)."""
        matched = [
            (route, found.groupdict())
            for route, pattern in self._routes
            if (found := pattern.fullmatch(path)) is not None
        ]
        wanted = "GET" if method == "HEAD" else method
        for route, params in matched:
            if route.method == wanted:
                return route, params
        allowed = sorted({route.method for route, _ in matched})
        return allowed + (["HEAD"] if "GET" in allowed else [])


def _pattern(rule: str) -> re.Pattern[str]:
    parts = re.split(r"<(\w+)>", rule)  # odd parts are parameter names
    return re.compile(
        "".join(
            f"(?P<{part}>[^/]+)" if index % 2 else re.escape(part)
            for index, part in enumerate(parts)
        )
    )


def request_path(environ: Mapping[str, Any]) -> str | None:
    """PATH_INFO as text (WSGI gives its bytes as latin-1 characters), or
    None if they are not UTF-8."""
    raw = str(environ.get("PATH_INFO", "")) or "/"
    try:
        return raw.encode("latin-1").decode("utf-8")
    except UnicodeError:
        return None


def request_query(environ: Mapping[str, Any]) -> dict[str, str]:
    """The first value of each field of the query string, decoded strictly."""
    raw = str(environ.get("QUERY_STRING", ""))
    try:
        text = raw.encode("latin-1").decode("utf-8")
        pairs = parse_qsl(
            text, keep_blank_values=True, errors="strict", max_num_fields=MAX_QUERY_FIELDS
        )
    except (UnicodeError, ValueError):
        raise FormRefused(400, "the query is not UTF-8 text of a few fields") from None
    query: dict[str, str] = {}
    for key, value in pairs:
        query.setdefault(key, value)
    return query


def request_form(environ: Mapping[str, Any]) -> dict[str, str]:
    """A POST's form, by ``runner.console.forms``' rules."""
    raw_length = str(environ.get("CONTENT_LENGTH") or "")
    length = int(raw_length) if raw_length.isascii() and raw_length.isdigit() else None
    if raw_length and length is None:
        raise FormRefused(400, "the Content-Length is not a number")
    if not check_length(environ.get("CONTENT_TYPE"), length):
        return {}
    assert length is not None  # check_length refuses a form of no stated length
    return parse_form(_read_body(environ, length))


def _read_body(environ: Mapping[str, Any], length: int) -> bytes:
    """The body's ``length`` bytes. A body that ends before them (the client
    closed its side: at once; or it stopped sending: after the server's
    socket timeout) is one 400 and one line in the log, not a half form
    taken for a whole one or a traceback."""
    stream = environ["wsgi.input"]
    # read1 returns what has come (wsgiref's input is the socket's buffered
    # reader), so what arrived before a timeout is counted in the message.
    read = getattr(stream, "read1", stream.read)
    body = b""
    try:
        while len(body) < length:
            chunk = read(length - len(body))
            if not chunk:
                break
            body += chunk
    except OSError:  # the socket timed out, or the client reset it
        pass
    if len(body) < length:
        address = str(environ.get("REMOTE_ADDR", ""))[:100]
        message = f"the body ended before its Content-Length ({len(body)} of {length} bytes)"
        log.warning("a request from %s: %s", address, message)
        raise FormRefused(400, message)
    return body


def wanted_path(environ: Mapping[str, Any], path: str) -> str:
    """The request's path and query, percent-encoded, to come back to."""
    wanted = quote(path)
    raw_query = str(environ.get("QUERY_STRING", ""))
    if raw_query:
        wanted += "?" + quote(raw_query.encode("latin-1", "replace"), safe="=&%+;,/:")
    return wanted


def send(
    environ: Mapping[str, Any],
    start_response: StartResponse,
    answer: Response,
    cookies: list[str],
) -> Iterable[bytes]:
    """Start ``answer`` and return its body for the server to write."""
    headers = {**ALWAYS, **answer.headers}
    headers.setdefault("Cache-Control", "no-store")
    if "Location" in headers:
        # A path parameter can end up in a redirect: keep it one header line.
        headers["Location"] = quote(headers["Location"], safe=_LOCATION_SAFE)
    pairs = [("Content-Type", answer.content_type), *headers.items()]
    pairs += [("Set-Cookie", cookie) for cookie in cookies]
    status = f"{answer.status} {HTTPStatus(answer.status).phrase}"
    head = environ.get("REQUEST_METHOD") == "HEAD"
    body = answer.body
    if isinstance(body, str):
        data = body.encode()
        start_response(status, [*pairs, ("Content-Length", str(len(data)))])
        return [] if head else [data]
    start_response(status, pairs)
    if head:
        getattr(body, "close", lambda: None)()
        return []
    # The frames as they come: the server writes each one out at once, and
    # closes the iterator (detaching it from the feed) when the client goes.
    return body


__all__ = [
    "ALWAYS",
    "Router",
    "check_prefix",
    "request_form",
    "request_path",
    "request_query",
    "send",
    "wanted_path",
]
