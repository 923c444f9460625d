"""Sign-in accounts of the standalone console (``runwright console``), kept
in a file of their own: one account a line, ``name:hash:role``, where the hash
is a salted scrypt hash that carries its own parameters, and the role says what
the account may do (runner/console/abilities.py: ``viewer``, ``reader`` or
``approver``)::

    alice:scrypt$32768$8$1$<salt, base64>$<key, base64>:approver

A line without a role (``name:hash``, as files were written before roles)
may do everything: an ``approver``.

The file holds password hashes, so it is refused, as ssh refuses a private
key, when its mode lets anyone but its owner read or write it.
:func:`add_account` writes it that way (0600, replaced atomically).
"""

from __future__ import annotations

import base64
import binascii
import contextlib
import fcntl
import hashlib
import hmac
import os
import secrets
import stat
import threading
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path

from runner.console.abilities import Ability, Role, abilities_of, parse_role
from runner.core.errors import ConfigurationError, InvalidInput

MAX_NAME_CHARS = 150
MIN_PASSWORD_CHARS = 8
# Longer passwords are refused rather than hashed: the work of a sign-in
# stays bounded whatever a client sends.
MAX_PASSWORD_CHARS = 1024
MAX_FILE_BYTES = 1024 * 1024

# scrypt's cost: 32 MiB and about 0.1 s a hash on a server core. A stored
# hash keeps the parameters it was made with, so raising these later leaves
# existing accounts valid (they move to the new cost when their password is
# set again).
SCRYPT_N = 2**15
SCRYPT_R = 8
SCRYPT_P = 1
SALT_BYTES = 16
KEY_BYTES = 32
# What a stored hash may ask for: enough for any sane cost, not enough for a
# typo in the file to make every sign-in take a gigabyte.
_MAX_N = 2**20
_MAX_MEMORY = 256 * 1024 * 1024
_SCHEME = "scrypt"


@dataclass(frozen=True)
class _Hash:
    n: int
    r: int
    p: int
    salt: bytes
    key: bytes

    @classmethod
    def parse(cls, text: str) -> _Hash | None:
        """The hash written as ``text``, or None if it is not one this module writes."""
        parts = text.split("$")
        if len(parts) != 6 or parts[0] != _SCHEME:
            return None
        numbers = parts[1:4]
        if not all(part.isascii() and part.isdigit() and len(part) <= 8 for part in numbers):
            return None
        n, r, p = (int(part) for part in numbers)
        if not (2 <= n <= _MAX_N and n & (n - 1) == 0 and 1 <= r <= 32 and 1 <= p <= 16):
            return None
        if 128 * n * r > _MAX_MEMORY:
            return None
        salt, key = _unb64(parts[4]), _unb64(parts[5])
        if salt is None or key is None or not 8 <= len(salt) <= 64 or not 16 <= len(key) <= 64:
            return None
        return cls(n, r, p, salt, key)

    def text(self) -> str:
        return "$".join(
            (_SCHEME, str(self.n), str(self.r), str(self.p), _b64(self.salt), _b64(self.key))
        )

    def derive(self, password: str) -> bytes:
        # surrogatepass: a password is never refused here (that would take
        # less time than a hash); one with lone surrogates matches nothing,
        # since hash_password refuses to store one.
        return hashlib.scrypt(
            password.encode("utf-8", "surrogatepass"),
            salt=self.salt,
            n=self.n,
            r=self.r,
            p=self.p,
            maxmem=128 * self.r * (self.n + self.p + 2) + 1024 * 1024,
            dklen=len(self.key),
        )


def _b64(raw: bytes) -> str:
    return base64.b64encode(raw).decode().rstrip("=")


def _unb64(text: str) -> bytes | None:
    if not text.isascii():
        return None
    try:
        return base64.b64decode(text + "=" * (-len(text) % 4), validate=True)
    except (binascii.Error, ValueError):
        return None


_dummy_lock = threading.Lock()
_dummy: _Hash | None = None


def _dummy_hash() -> _Hash:
    """What an unknown name's password is checked against: the same work as
    a real account's, and a key no password derives."""
    global _dummy
    with _dummy_lock:
        if _dummy is None:
            _dummy = _Hash(
                SCRYPT_N,
                SCRYPT_R,
                SCRYPT_P,
                secrets.token_bytes(SALT_BYTES),
                secrets.token_bytes(KEY_BYTES),
            )
        return _dummy


def check_name(name: str) -> str:
    """``name`` if it can name an account: printable, no ``:`` or whitespace,
    1 to 150 characters. Raises :class:`InvalidInput` (without echoing it)."""
    if not 1 <= len(name) <= MAX_NAME_CHARS:
        raise InvalidInput(f"an account name has 1 to {MAX_NAME_CHARS} characters")
    if not name.isprintable() or any(char.isspace() or char == ":" for char in name):
        raise InvalidInput("an account name is printable text without ':' or whitespace")
    return name


def check_password(password: str) -> str:
    """``password`` if it may be set: 8 to 1024 characters of text."""
    if not MIN_PASSWORD_CHARS <= len(password) <= MAX_PASSWORD_CHARS:
        raise InvalidInput(
            f"a password has {MIN_PASSWORD_CHARS} to {MAX_PASSWORD_CHARS} characters"
        )
    try:
        password.encode("utf-8")
    except UnicodeEncodeError:
        raise InvalidInput("a password must be text (it is not valid UTF-8)") from None
    return password


def hash_password(password: str) -> str:
    """A salted scrypt hash of ``password``, with its parameters, as stored."""
    check_password(password)
    made = _Hash(SCRYPT_N, SCRYPT_R, SCRYPT_P, secrets.token_bytes(SALT_BYTES), b"\0" * KEY_BYTES)
    key = made.derive(password)
    return _Hash(made.n, made.r, made.p, made.salt, key).text()


class Accounts:
    """The accounts of a file, by name; ``roles``: the role of each account
    that has one (one without may do everything)."""

    def __init__(self, hashes: Mapping[str, str], roles: Mapping[str, Role] | None = None) -> None:
        self._hashes: dict[str, _Hash] = {}
        self._texts: dict[str, str] = {}
        self._roles: dict[str, Role] = {}
        for name, role in (roles or {}).items():
            if name not in hashes:
                raise InvalidInput(f"the role of {name!r} is given for no account")
            self._roles[name] = Role(role)
        for name, text in hashes.items():
            check_name(name)
            parsed = _Hash.parse(text)
            if parsed is None:
                raise InvalidInput(f"the hash of account {name!r} is not one hash_password makes")
            self._hashes[name] = parsed
            self._texts[name] = text

    @classmethod
    def load(cls, path: str | os.PathLike[str]) -> Accounts:
        """The accounts of the file at ``path``. A file that is missing,
        unreadable, readable or writable by group or others, or that has a
        line that is not ``name:hash`` raises one :class:`ConfigurationError`."""
        return _read(Path(path))[0]

    @property
    def names(self) -> tuple[str, ...]:
        return tuple(self._hashes)

    def __len__(self) -> int:
        return len(self._hashes)

    def __contains__(self, name: object) -> bool:
        return name in self._hashes

    def role(self, name: str) -> Role | None:
        """The account's role (None: it has none, or there is no such account)."""
        return self._roles.get(name)

    def abilities(self, name: str) -> frozenset[Ability]:
        """What the account may do (nothing: there is no such account)."""
        if name not in self._hashes:
            return frozenset()
        return abilities_of(self._roles.get(name))

    def check(self, name: str, password: str) -> str | None:
        """``name`` if ``password`` is its account's password, else None. The
        same work is done whether the account exists or not."""
        found = self._hashes.get(name) if isinstance(name, str) else None
        target = found or _dummy_hash()
        fits = isinstance(password, str) and len(password) <= MAX_PASSWORD_CHARS
        derived = target.derive(password[:MAX_PASSWORD_CHARS] if fits else "")
        same = hmac.compare_digest(derived, target.key)
        return name if same and fits and found is not None else None

    def fingerprint(self, name: str) -> str | None:
        """A digest of the account's stored hash (None: no such account). It
        changes whenever the password is set, even to the same password (the
        salt is new): a session bound to it ends then."""
        text = self._texts.get(name)
        if text is None:
            return None
        return hashlib.sha256(text.encode()).hexdigest()[:32]

    def lines(self) -> str:
        return "".join(
            f"{name}:{text}{_role_suffix(self._roles.get(name))}\n"
            for name, text in self._texts.items()
        )


def _role_suffix(role: Role | None) -> str:
    return "" if role is None else f":{role.value}"


_Stamp = tuple[int, int, int, int, int]


def _read(path: Path) -> tuple[Accounts, _Stamp]:
    where = f"the console accounts file {path}"
    try:
        with open(path, "rb") as handle:
            info = os.fstat(handle.fileno())
            if not stat.S_ISREG(info.st_mode):
                raise ConfigurationError(f"{where} is not a regular file")
            if info.st_mode & 0o077:
                mode = stat.S_IMODE(info.st_mode)
                raise ConfigurationError(
                    f"{where} is open to group or others (mode {mode:04o}); it holds password "
                    f"hashes: run `chmod 600 {path}`"
                )
            raw = handle.read(MAX_FILE_BYTES + 1)
    except FileNotFoundError:
        raise ConfigurationError(
            f"there is no console accounts file at {path}: add an account with "
            f"`runwright console add-user NAME --users {path}`"
        ) from None
    except IsADirectoryError:
        raise ConfigurationError(f"{where} is not a regular file") from None
    except OSError as exc:
        raise ConfigurationError(f"cannot read {where}: {exc.strerror}") from None
    if len(raw) > MAX_FILE_BYTES:
        raise ConfigurationError(f"{where} is larger than {MAX_FILE_BYTES} bytes")
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError:
        raise ConfigurationError(f"{where} is not UTF-8 text") from None
    hashes: dict[str, str] = {}
    roles: dict[str, Role] = {}
    for number, line in enumerate(text.splitlines(), start=1):
        if not line.strip():
            continue
        # The line is not quoted in the error: it holds a hash. A hash has
        # no ":" (base64 and "$"), so a third field is the role.
        name, sep, rest = line.partition(":")
        stored, has_role, role = rest.partition(":")
        try:
            check_name(name)
            if has_role:
                roles[name] = parse_role(role)
        except InvalidInput as exc:
            raise ConfigurationError(f"line {number} of {where}: {exc.message}") from None
        if not sep or _Hash.parse(stored) is None:
            raise ConfigurationError(
                f"line {number} of {where} is not name:hash or name:hash:role (as "
                "`runwright console add-user` writes it)"
            )
        if name in hashes:
            raise ConfigurationError(f"line {number} of {where} repeats the account {name!r}")
        hashes[name] = stored
    stamp = (info.st_dev, info.st_ino, info.st_mtime_ns, info.st_size, info.st_mode)
    return Accounts(hashes, roles), stamp


def add_account(
    path: str | os.PathLike[str], name: str, password: str, role: Role | str | None = None
) -> bool:
    """Add the account ``name`` to the file at ``path`` (created 0600, with
    its directory 0700), or set its password if it exists; with ``role``,
    set its role too (None: a new account has none, and may do everything;
    an existing one keeps its own). An unknown role raises
    :class:`InvalidInput` and leaves the file as it was. The file is
    replaced atomically: a console reading it sees the old accounts or the
    new ones. True: an existing account's password was replaced (its
    sessions end)."""
    check_name(name)
    given = None if role is None else parse_role(role)
    stored = hash_password(password)
    target = Path(path)
    target.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
    with _locked(target.parent):
        hashes: dict[str, str] = {}
        roles: dict[str, Role] = {}
        if target.exists():
            found = _read(target)[0]
            hashes, roles = dict(found._texts), dict(found._roles)
        replaced = name in hashes
        hashes[name] = stored
        if given is not None:
            roles[name] = given
        _write(target, Accounts(hashes, roles).lines())
    return replaced


@contextlib.contextmanager
def _locked(directory: Path) -> Iterator[None]:
    """Two ``add-user`` at once: the second reads what the first wrote."""
    fd = os.open(directory, os.O_RDONLY)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)  # releases the lock


def _write(path: Path, text: str) -> None:
    temporary = path.with_name(f".{path.name}.{secrets.token_hex(6)}.tmp")
    fd = os.open(temporary, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as handle:
            os.fchmod(handle.fileno(), 0o600)  # whatever the umask
            handle.write(text)
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(temporary, path)
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            temporary.unlink()
        raise
    directory = os.open(path.parent, os.O_RDONLY)
    try:
        os.fsync(directory)  # the rename survives a crash
    finally:
        os.close(directory)


class AccountsFile:
    """The accounts of the file at ``path``, read again whenever it changes
    (a password set with ``add-user`` takes effect on the next request, and
    ends that account's sessions, without a restart)."""

    def __init__(self, path: str | os.PathLike[str]) -> None:
        self.path = Path(path)
        self._lock = threading.Lock()
        self._stamp: _Stamp | None = None
        self._accounts: Accounts | None = None

    def current(self) -> Accounts:
        """The file's accounts now. Raises :class:`ConfigurationError` while
        the file cannot be used (then nobody is signed in: the console fails
        closed)."""
        try:
            info = os.stat(self.path)
            stamp: _Stamp | None = (
                info.st_dev,
                info.st_ino,
                info.st_mtime_ns,
                info.st_size,
                info.st_mode,
            )
        except OSError:
            stamp = None
        with self._lock:
            if self._accounts is None or stamp != self._stamp:
                self._accounts = None
                self._accounts, self._stamp = _read(self.path)
            return self._accounts


__all__ = [
    "Accounts",
    "AccountsFile",
    "add_account",
    "check_name",
    "check_password",
    "hash_password",
]
