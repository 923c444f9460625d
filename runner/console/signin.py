"""Signing in to the console with the accounts of a console accounts file
(``runner.console.accounts``), for any web framework: the standalone console
(``runner.console.standalone``) uses it, and so does the Flask example
(examples/flask_app/app.py), which is what a team mounting the console behind
a sign-in of its own copies.

What it holds to, wherever it is used:

- guessing is slowed down per name and per address (:class:`LoginLimiter`),
  and every attempt is counted before its password is hashed;
- at most ``HASHING_AT_ONCE`` passwords are hashed at once (32 MiB each);
- a session (``runner.console.sessions``) names the account and a fingerprint
  of its stored hash: a new password ends it, and so does signing out, on the
  server and not only in the browser;
- after signing in, ``next=`` only leads to a page of the console.
"""

from __future__ import annotations

import hmac
import logging
import math
import os
import threading
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from urllib.parse import urlsplit

from runner.console.accounts import Accounts, AccountsFile
from runner.console.sessions import SESSION_SECONDS, Attempt, LoginLimiter, Session, Sessions
from runner.core.errors import ConfigurationError

log = logging.getLogger(__name__)

# Sign-ins that hash at once: each takes 32 MiB for a tenth of a second, and
# a burst of them must not take the server's memory or every core.
HASHING_AT_ONCE = 2
MAX_NEXT_CHARS = 2000

WRONG = "The name or the password is wrong."
UNAVAILABLE = "Nobody can sign in now: the console's accounts file cannot be read (see its log)."


@dataclass(frozen=True)
class SignedIn:
    """A sign-in that succeeded: the new session and its signed value, for
    the cookie (or the framework's session) that carries it."""

    session: Session
    value: str


@dataclass(frozen=True)
class Refused:
    """A sign-in that did not: 403 (wrong name or password), 429 (too many
    failures: ``retry_after`` seconds) or 503 (the accounts file cannot be
    used). ``message`` is for the sign-in page."""

    status: int
    message: str
    retry_after: int | None = None


class SignIn:
    """Sign-ins and sessions for the accounts of ``accounts`` (a file path,
    read again when it changes, or :class:`Accounts`), with sessions signed
    by a key derived from ``secret_key``. One per process: the limiter's
    counts and the signed-out sessions are kept in its memory."""

    def __init__(
        self,
        accounts: Accounts | AccountsFile | str | os.PathLike[str],
        *,
        secret_key: str,
        session_seconds: float = SESSION_SECONDS,
        limiter: LoginLimiter | None = None,
        clock: Callable[[], float] = time.time,
    ) -> None:
        if not isinstance(accounts, Accounts | AccountsFile):
            accounts = AccountsFile(accounts)
        self._accounts = accounts
        self.sessions = Sessions(secret_key, lifetime=session_seconds, clock=clock)
        self.limiter = limiter or LoginLimiter()
        self._hashing = threading.BoundedSemaphore(HASHING_AT_ONCE)
        self._broken: str | None = None  # why the accounts file cannot be used

    def accounts(self) -> Accounts | None:
        """The accounts now, or None while the file cannot be used (said
        once in the log, not on every request)."""
        if isinstance(self._accounts, Accounts):
            return self._accounts
        try:
            accounts = self._accounts.current()
        except ConfigurationError as exc:
            if exc.message != self._broken:
                log.error("nobody can sign in to the console: %s", exc.message)
                self._broken = exc.message
            return None
        if self._broken is not None:
            log.warning("the console's accounts file can be read again")
            self._broken = None
        return accounts

    def attempt(self, name: str, password: str, address: str) -> SignedIn | Refused:
        """Sign ``name`` in with ``password``, from ``address`` (the client's
        IP address, as the limiter counts it)."""
        accounts = self.accounts()
        if accounts is None:
            return Refused(503, UNAVAILABLE)
        reserved: Attempt | float = self.limiter.reserve(name, address)
        if isinstance(reserved, float):
            seconds = math.ceil(reserved)
            message = f"Too many failed sign-ins: try again in {seconds} s."
            return Refused(429, message, seconds)
        with self._hashing:
            user = accounts.check(name, password)
        fingerprint = None if user is None else accounts.fingerprint(user)
        if user is None or fingerprint is None:
            self.limiter.failed(reserved)
            log.warning("a failed sign-in to the console from %s", address[:100])
            return Refused(403, WRONG)
        self.limiter.succeeded(reserved)
        value, session = self.sessions.issue(user, fingerprint)
        log.info("%s signed in to the console from %s", user, address[:100])
        return SignedIn(session, value)

    def session(self, values: Iterable[str]) -> Session | None:
        """The first of ``values`` (signed session values, from cookies) that
        is a session now: signed here, unexpired, not signed out, of an
        account that still has the password it signed in with. None while
        the accounts file cannot be used: the console fails closed."""
        accounts = self.accounts()
        if accounts is None:
            return None
        for value in values:
            session = self.sessions.read(value)
            if session is not None and _current(accounts, session):
                return session
        return None

    def end(self, session: Session) -> None:
        """Sign ``session`` out on the server: its value no longer works,
        wherever a copy of it is."""
        self.sessions.end(session)
        log.info("%s signed out of the console", session.user)


def _current(accounts: Accounts, session: Session) -> bool:
    """The session's account exists and has the password it signed in with."""
    fingerprint = accounts.fingerprint(session.user)
    return fingerprint is not None and hmac.compare_digest(
        fingerprint.encode(), session.fingerprint.encode()
    )


def local_next(raw: str | None, prefix: str, avoid: Iterable[str] = ()) -> str:
    """Where to go after signing in: ``raw`` if it is a path of the console
    under ``prefix`` (and none of ``avoid``), else the console's runs page.
    Anything that could leave the site (``//host``, ``/\\host``, a scheme) or
    break a header (control characters) is ignored, not followed."""
    home = prefix + "/"
    if not raw or len(raw) > MAX_NEXT_CHARS or not raw.isascii():
        return home
    if not raw.startswith(home) or raw.startswith("//") or "\\" in raw:
        return home
    if any(ord(char) < 0x21 or ord(char) == 0x7F for char in raw):
        return home
    parts = urlsplit(raw)
    if parts.scheme or parts.netloc or parts.path in set(avoid):
        return home
    return raw


__all__ = [
    "HASHING_AT_ONCE",
    "MAX_NEXT_CHARS",
    "Refused",
    "SignIn",
    "SignedIn",
    "local_next",
]
