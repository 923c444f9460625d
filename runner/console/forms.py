"""The console's forms, decoded strictly and the same way by every adapter:
URL-encoded, UTF-8, small. Frameworks decode bad bytes leniently into text the
browser never sent; the console refuses them instead, before anything runs.
A field a person writes as JSON is parsed here too, as strictly."""

from __future__ import annotations

import json
from typing import Any
from urllib.parse import parse_qsl

from runner.core.errors import InvalidApprovalInput, InvalidInput

MAX_FORM_BYTES = 64 * 1024
MAX_FORM_FIELDS = 20


class FormRefused(InvalidInput):
    """The body is not a form the console takes; ``status`` says why (400,
    413 or 415)."""

    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status


def check_length(content_type: str | None, content_length: int | None) -> bool:
    """Whether a body of ``content_length`` bytes is worth reading (False: a
    form with no fields at all). Raises :class:`FormRefused` before anything
    is read for a body of another kind or of no stated or too great a length."""
    kind = (content_type or "").split(";")[0].strip().lower()
    if not kind and not content_length:
        return False
    if kind != "application/x-www-form-urlencoded":
        raise FormRefused(415, "the console takes URL-encoded forms only")
    if content_length is None or content_length > MAX_FORM_BYTES:
        raise FormRefused(
            413, f"a form must state its length and be at most {MAX_FORM_BYTES} bytes"
        )
    return True


def parse_form(body: bytes) -> dict[str, str]:
    """The first value of each field of ``body``."""
    if len(body) > MAX_FORM_BYTES:
        raise FormRefused(413, f"a form must be at most {MAX_FORM_BYTES} bytes")
    try:
        pairs = parse_qsl(
            body.decode("utf-8"),
            keep_blank_values=True,
            errors="strict",
            max_num_fields=MAX_FORM_FIELDS,
        )
    except ValueError:  # not UTF-8 (raw or percent-encoded), or too many fields
        raise FormRefused(400, "the form is not UTF-8 text of a few fields") from None
    form: dict[str, str] = {}
    for key, value in pairs:
        form.setdefault(key, value)
    return form


def parse_json(raw: str, what: str) -> Any:
    """A field a person wrote as JSON (edited arguments, an answer), parsed:
    NaN and Infinity are refused, as the engine stores neither. Else
    :class:`InvalidApprovalInput` saying where it breaks, and that it was
    ``what`` that was refused."""

    def refuse(constant: str) -> Any:
        raise InvalidApprovalInput(f"refused {what}: not JSON ({constant} is not JSON)")

    try:
        return json.loads(raw, parse_constant=refuse)
    except RecursionError:
        raise InvalidApprovalInput(f"refused {what}: nested too deep") from None
    except ValueError as exc:
        raise InvalidApprovalInput(f"refused {what}: not JSON ({exc})") from None
