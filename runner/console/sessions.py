"""Sessions of the standalone console: signed cookies, CSRF tokens, and a
limiter of failed sign-ins.

A session is a cookie the server signed (HMAC-SHA256 with a key derived from
``RUNWRIGHT_SECRET_KEY``) that names the account, a fingerprint of the
account's stored hash (a new password ends the session), a random nonce and
an expiry. Nothing is kept on the server but the nonces of sessions signed
out before they expired. Before sign-in, a *pre-session* cookie of the same
kind carries only a nonce: the sign-in form's CSRF token is derived from it,
so a sign-in posted from another site (login CSRF) is refused, and an
approval link's page has a token for its form too.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import hmac
import ipaddress
import math
import re
import secrets
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field

from runner.core.errors import ConfigurationError

SESSION_COOKIE = "runwright_session"
PRESESSION_COOKIE = "runwright_presession"
SESSION_SECONDS = 12 * 3600
MAX_COOKIE_CHARS = 1024
_VERSION = "1"
_B64URL = re.compile(r"[A-Za-z0-9_-]{1,1024}")


def derive_key(secret_key: str) -> bytes:
    """The console's own key, derived from the approval-token setting: a
    console cookie and an approval token are never signed with the same key."""
    return hmac.new(secret_key.encode(), b"runwright console sessions v1", hashlib.sha256).digest()


def _b64(raw: bytes) -> str:
    return base64.urlsafe_b64encode(raw).decode().rstrip("=")


def _unb64(text: str) -> bytes | None:
    if _B64URL.fullmatch(text) is None:  # the decoder would skip other characters
        return None
    try:
        return base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))
    except (binascii.Error, ValueError):
        return None


@dataclass(frozen=True)
class Session:
    """A signed-in account's session, as its cookie says."""

    user: str
    fingerprint: str
    nonce: str
    expires: int


@dataclass(frozen=True)
class PreSession:
    """A visitor who is not signed in: only a nonce for CSRF tokens."""

    nonce: str
    expires: int


class Sessions:
    """Issues and reads the console's cookies. ``clock``: seconds since the
    epoch (the expiry is in the signed value, not only in the cookie's
    ``Max-Age``, which the client could ignore)."""

    def __init__(
        self,
        secret_key: str,
        *,
        lifetime: float = SESSION_SECONDS,
        clock: Callable[[], float] = time.time,
    ) -> None:
        if not secret_key:
            raise ConfigurationError("the console's sessions need a secret key")
        self._key = derive_key(secret_key)
        self.lifetime = lifetime
        self.clock = clock
        self._lock = threading.Lock()
        self._ended: dict[str, int] = {}  # nonce -> expiry, signed out early

    # ---------------------------------------------------------- signing

    def _mac(self, payload: bytes) -> bytes:
        return hmac.new(self._key, payload, hashlib.sha256).digest()

    def _seal(self, fields: list[str]) -> str:
        payload = ":".join(fields).encode()
        return f"{_b64(payload)}.{_b64(self._mac(payload))}"

    def _open(self, value: str, kind: str, count: int) -> list[str] | None:
        """The fields of a cookie this server signed, of ``kind``, unexpired."""
        if len(value) > MAX_COOKIE_CHARS or not value.isascii():
            return None
        body, dot, mac = value.partition(".")
        payload, sent = _unb64(body), _unb64(mac)
        if not dot or payload is None or sent is None:
            return None
        if not hmac.compare_digest(self._mac(payload), sent):
            return None
        try:
            fields = payload.decode().split(":")
        except UnicodeDecodeError:
            return None
        if len(fields) != count or fields[0] != kind + _VERSION:
            return None
        expires = fields[1]
        if not expires.isdigit() or int(expires) <= self.clock():
            return None
        return fields

    def _expiry(self) -> int:
        return math.floor(self.clock() + self.lifetime)

    # --------------------------------------------------------- sessions

    def issue(self, user: str, fingerprint: str) -> tuple[str, Session]:
        """A new session of ``user`` (a new nonce: nothing of a session
        before sign-in carries over), and its cookie value."""
        session = Session(user, fingerprint, secrets.token_urlsafe(18), self._expiry())
        fields = ["s" + _VERSION, str(session.expires), session.nonce, fingerprint, user]
        return self._seal(fields), session

    def read(self, value: str) -> Session | None:
        """The session of a cookie value, or None: not signed here, tampered
        with, expired, or signed out."""
        fields = self._open(value, "s", 5)
        if fields is None:
            return None
        session = Session(fields[4], fields[3], fields[2], int(fields[1]))
        with self._lock:
            if session.nonce in self._ended:
                return None
        return session

    def end(self, session: Session) -> None:
        """Sign ``session`` out here and now, not only in the browser that
        sends its cookie. Kept in memory until it would have expired anyway
        (a restart forgets it: the expiry bounds what a copied cookie is worth)."""
        now = self.clock()
        with self._lock:
            self._ended = {nonce: at for nonce, at in self._ended.items() if at > now}
            self._ended[session.nonce] = session.expires

    def issue_pre(self) -> tuple[str, PreSession]:
        pre = PreSession(secrets.token_urlsafe(18), self._expiry())
        return self._seal(["p" + _VERSION, str(pre.expires), pre.nonce]), pre

    def read_pre(self, value: str) -> PreSession | None:
        fields = self._open(value, "p", 3)
        return None if fields is None else PreSession(fields[2], int(fields[1]))

    # ------------------------------------------------------------- CSRF

    def csrf_token(self, holder: Session | PreSession) -> str:
        """The CSRF token of a session or pre-session: derived from its nonce,
        so it is never sent in the cookie and lives exactly as long."""
        kind = "csrf-s:" if isinstance(holder, Session) else "csrf-p:"
        return _b64(self._mac((kind + holder.nonce).encode()))

    def csrf_ok(self, holder: Session | PreSession | None, sent: str) -> bool:
        if holder is None or not sent:
            return False
        expected = self.csrf_token(holder).encode()
        return hmac.compare_digest(expected, sent.encode("utf-8", "surrogatepass"))


@dataclass(frozen=True)
class Attempt:
    """A check of a password that :meth:`LoginLimiter.reserve` let through,
    already counted as a failure; tell the limiter how it went."""

    name: str
    address: str
    # The address was counted among the name's failing addresses.
    listed: bool
    # Of the name and of the address: the wait before the attempt and the
    # one it set, to be undone if it was right and nothing else moved it.
    waits: tuple[tuple[float, float], tuple[float, float]]


@dataclass
class _Count:
    failures: int
    last: float  # time of the last one
    until: float  # no attempt before
    # Of a name: the failures of each address that failed for it, for at
    # most ``free`` addresses (the rest are counted in ``failures`` only).
    by: dict[str, int] = field(default_factory=dict)


class LoginLimiter:
    """Failed sign-ins, counted in memory by account name and by address
    (an IPv6 address by its /64 network, which one host may hold whole).

    After ``free`` failures within ``window`` seconds, the next attempt
    waits 2 s, and each further failure doubles the wait (4 s, 8 s, ... up
    to ``max_wait``); an attempt during the wait is refused without checking
    the password, so guessing costs time however fast a client sends.

    An attempt is counted before its password is checked (:meth:`reserve`)
    and forgiven if it was right, so a burst of concurrent attempts checks at
    most ``free`` passwords in a window, not one per request.

    A name's wait holds back the addresses that have failed for it, so one
    who knows a name cannot lock its owner out from everywhere else: a name
    keeps the first ``name_free`` addresses that failed for it, and while it
    has fewer, an address outside them may check one password past the
    wait (and is one of them if it fails). A guesser with many addresses
    gets fewer than ``name_free`` checks more, not that many an address;
    once the name has ``name_free`` failing addresses its wait binds all.
    An address's own count always applies. A success forgives its own
    address's failures for the name, not the others'; an address's count
    only ages out. docs/console-standalone.md says what this promises.
    """

    def __init__(
        self,
        *,
        name_free: int = 5,
        address_free: int = 20,
        window: float = 900.0,
        max_wait: float = 300.0,
        max_keys: int = 10_000,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.free = {"name": name_free, "address": address_free}
        self.window = window
        self.max_wait = max_wait
        self.max_keys = max_keys
        self.clock = clock
        self._lock = threading.Lock()
        self._seen: dict[tuple[str, str], _Count] = {}

    def reserve(self, name: str, address: str) -> Attempt | float:
        """Count an attempt at ``name``'s password from ``address`` as a
        failure, and return it to be checked; or the seconds to wait (> 0),
        counting nothing."""
        name, address = name[:200], _address_key(address)
        now = self.clock()
        with self._lock:
            by_name = self._alive(("name", name), now)
            by_address = self._alive(("address", address), now)
            exempt = (
                bool(address)
                and by_name is not None
                and address not in by_name.by
                and len(by_name.by) < self.free["name"]
            )
            waits = [
                count.until - now
                for count in (by_address, None if exempt else by_name)
                if count is not None
            ]
            wait = max([0.0, *waits])
            if wait > 0:
                return wait
            name_waits = self._count("name", name, now)
            address_waits = self._count("address", address, now)
            listed = self._list(name, address)
            if len(self._seen) > self.max_keys:
                self._prune(now)
        return Attempt(name, address, listed, (name_waits, address_waits))

    def failed(self, attempt: Attempt) -> None:
        """The password was wrong: the attempt stays counted, from now."""
        now = self.clock()
        with self._lock:
            for key in (("name", attempt.name), ("address", attempt.address)):
                count = self._seen.get(key)
                if count is not None:
                    count.last = max(count.last, now)

    def succeeded(self, attempt: Attempt) -> None:
        """The password was right: forgive the attempt, and the address's
        earlier failures for the name."""
        with self._lock:
            (name_before, name_set), (address_before, address_set) = attempt.waits
            count = self._seen.get(("name", attempt.name))
            if count is not None:
                forgiven = count.by.pop(attempt.address, 0) if attempt.listed else 1
                self._forgive(count, "name", forgiven, name_before, name_set)
                if count.failures == 0:
                    del self._seen[("name", attempt.name)]
            count = self._seen.get(("address", attempt.address))
            if count is not None:
                self._forgive(count, "address", 1, address_before, address_set)

    def _alive(self, key: tuple[str, str], now: float) -> _Count | None:
        count = self._seen.get(key)
        return count if count is not None and now - count.last < self.window else None

    def _count(self, kind: str, key: str, now: float) -> tuple[float, float]:
        """Count a failure of ``key``; its wait before, and after."""
        count = self._seen.get((kind, key))
        if count is None or now - count.last >= self.window:
            count = self._seen[(kind, key)] = _Count(0, now, 0.0)
        before = count.until
        count.failures += 1
        count.last = now
        over = count.failures - self.free[kind]
        if over >= 0:
            count.until = now + min(self.max_wait, 2.0 ** (over + 1))
        return before, count.until

    def _list(self, name: str, address: str) -> bool:
        """Count the failure among the name's failing addresses, if the
        address is one of them or there is room."""
        count = self._seen[("name", name)]
        if address and (address in count.by or len(count.by) < self.free["name"]):
            count.by[address] = count.by.get(address, 0) + 1
            return True
        return False

    def _forgive(
        self, count: _Count, kind: str, failures: int, before: float, set_to: float
    ) -> None:
        count.failures = max(0, count.failures - failures)
        if count.failures < self.free[kind]:
            count.until = 0.0
        elif count.until == set_to:  # no failure since: the wait it had
            count.until = before

    def _prune(self, now: float) -> None:
        self._seen = {k: v for k, v in self._seen.items() if now - v.last < self.window}
        if len(self._seen) > self.max_keys:  # a flood of names: forget the oldest
            kept = sorted(self._seen.items(), key=lambda item: item[1].last)[-self.max_keys :]
            self._seen = dict(kept)


def _address_key(address: str) -> str:
    """What an address is counted as: an IPv4 address (an IPv4-mapped IPv6
    one too), an IPv6 address's /64 network, or anything else as it is."""
    try:
        parsed = ipaddress.ip_address(address)
    except ValueError:
        return address[:100]
    if isinstance(parsed, ipaddress.IPv6Address):
        if parsed.ipv4_mapped is not None:
            return str(parsed.ipv4_mapped)
        return str(ipaddress.IPv6Network((parsed, 64), strict=False))
    return str(parsed)


def cookie_values(header: str, name: str) -> list[str]:
    """Every value of the cookie ``name`` in a ``Cookie`` header (a browser
    may send two of one name, for different paths)."""
    found = []
    for part in header.split(";"):
        key, sep, value = part.strip().partition("=")
        if sep and key == name:
            found.append(value.strip().strip('"'))
    return found


def set_cookie(
    name: str, value: str, *, path: str, secure: bool, max_age: int | None = None
) -> str:
    """A ``Set-Cookie`` value: HttpOnly (no script reads it), SameSite=Strict
    (no other site's page sends it: no CSRF, no login CSRF), scoped to the
    console's path, and Secure when the console is served over TLS."""
    parts = [f"{name}={value}", f"Path={path}", "HttpOnly", "SameSite=Strict"]
    if max_age is not None:
        parts.append(f"Max-Age={max_age}")
    if secure:
        parts.append("Secure")
    return "; ".join(parts)


__all__ = [
    "PRESESSION_COOKIE",
    "SESSION_COOKIE",
    "Attempt",
    "LoginLimiter",
    "PreSession",
    "Session",
    "Sessions",
    "cookie_values",
    "derive_key",
    "set_cookie",
]
