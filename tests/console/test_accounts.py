"""The standalone console's accounts file: scrypt hashes, strict loading,
atomic updates (runner/console/accounts.py)."""

from __future__ import annotations

import hashlib
import os
import stat
from pathlib import Path
from typing import Any

import pytest

from runner.console import accounts as accounts_module
from runner.console.accounts import (
    SCRYPT_N,
    SCRYPT_P,
    SCRYPT_R,
    Accounts,
    AccountsFile,
    add_account,
    hash_password,
)
from runner.core.errors import ConfigurationError, InvalidInput

PASSWORD = "correct horse battery"


@pytest.fixture
def users(tmp_path: Path) -> Path:
    path = tmp_path / "conf" / "console-users"
    add_account(path, "alice", PASSWORD)
    return path


def test_a_hash_checks_its_password_and_no_other() -> None:
    stored = hash_password(PASSWORD)
    assert stored.startswith(f"scrypt${SCRYPT_N}${SCRYPT_R}${SCRYPT_P}$")
    assert PASSWORD not in stored
    assert hash_password(PASSWORD) != stored  # a new salt each time
    accounts = Accounts({"alice": stored})
    assert accounts.check("alice", PASSWORD) == "alice"
    assert accounts.check("alice", PASSWORD + " ") is None
    assert accounts.check("alice", PASSWORD.upper()) is None
    assert accounts.check("alice", "") is None
    assert accounts.check("bob", PASSWORD) is None  # unknown name
    assert accounts.check("", PASSWORD) is None
    assert accounts.check("alice\udcff", PASSWORD) is None
    assert accounts.check("alice", "x" * 5000) is None  # longer than any password


def test_a_password_past_the_limit_does_not_match_its_first_part() -> None:
    base = "p" * accounts_module.MAX_PASSWORD_CHARS
    accounts = Accounts({"alice": hash_password(base)})
    assert accounts.check("alice", base) == "alice"
    assert accounts.check("alice", base + "more") is None


def test_an_unknown_name_costs_the_same_hash_as_a_known_one(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    accounts = Accounts({"alice": hash_password(PASSWORD)})
    calls: list[dict[str, Any]] = []
    real = hashlib.scrypt

    def counting(password: bytes, **kwargs: Any) -> bytes:
        calls.append({k: kwargs[k] for k in ("n", "r", "p", "dklen")})
        return real(password, **kwargs)

    monkeypatch.setattr(accounts_module.hashlib, "scrypt", counting)
    accounts.check("alice", "wrong password")
    accounts.check("nobody", "wrong password")
    accounts.check("alice", "y" * 5000)
    assert len(calls) == 3 and calls[0] == calls[1] == calls[2]
    assert calls[0] == {"n": SCRYPT_N, "r": SCRYPT_R, "p": SCRYPT_P, "dklen": 32}


def test_add_account_writes_a_private_file_and_replaces_a_name_in_place(
    tmp_path: Path, users: Path
) -> None:
    assert stat.S_IMODE(users.stat().st_mode) == 0o600
    assert stat.S_IMODE(users.parent.stat().st_mode) == 0o700
    assert add_account(users, "bob", "bob's password") is False
    before = Accounts.load(users)
    assert before.names == ("alice", "bob")
    assert add_account(users, "alice", "a new password") is True
    after = Accounts.load(users)
    assert after.names == ("alice", "bob")  # replaced in place, not appended
    assert after.check("alice", PASSWORD) is None
    assert after.check("alice", "a new password") == "alice"
    assert after.check("bob", "bob's password") == "bob"
    assert before.fingerprint("alice") != after.fingerprint("alice")
    assert before.fingerprint("bob") == after.fingerprint("bob")
    assert after.fingerprint("carol") is None
    # Setting the same password again is a new hash: its sessions end too.
    add_account(users, "bob", "bob's password")
    assert Accounts.load(users).fingerprint("bob") != after.fingerprint("bob")
    assert stat.S_IMODE(users.stat().st_mode) == 0o600
    assert sorted(p.name for p in users.parent.iterdir()) == ["console-users"]  # no temp files
    assert len(users.read_text().splitlines()) == 2


def test_add_account_makes_the_file_private_whatever_the_umask(tmp_path: Path) -> None:
    old = os.umask(0)
    try:
        add_account(tmp_path / "users", "alice", PASSWORD)
    finally:
        os.umask(old)
    assert stat.S_IMODE((tmp_path / "users").stat().st_mode) == 0o600


@pytest.mark.parametrize(
    "name",
    [
        "",
        "a:b",
        "a b",
        "a\tb",
        "a\nb",
        "alice\n",
        "\x00",
        "a\x1bb",
        "a\u2028b",
        "\u00a0",
        "x" * 151,
        "bad\udcff",
    ],
)
def test_hostile_names_are_refused(tmp_path: Path, name: str) -> None:
    with pytest.raises(InvalidInput):
        add_account(tmp_path / "users", name, PASSWORD)
    assert not (tmp_path / "users").exists()
    with pytest.raises(InvalidInput):
        Accounts({name: hash_password(PASSWORD)})


def test_names_that_are_printable_are_taken(tmp_path: Path) -> None:
    for name in ("alice@example.com", "x" * 150, "zoë", "o'brien"):
        add_account(tmp_path / "users", name, PASSWORD)
        assert Accounts.load(tmp_path / "users").check(name, PASSWORD) == name


@pytest.mark.parametrize("password", ["", "short", "1234567", "p" * 1025, "bad\udcffpassword"])
def test_weak_or_broken_passwords_are_refused(tmp_path: Path, password: str) -> None:
    with pytest.raises(InvalidInput):
        add_account(tmp_path / "users", "alice", password)
    with pytest.raises(InvalidInput):
        hash_password(password)
    assert not (tmp_path / "users").exists()


def test_a_missing_or_unreadable_file_is_one_clear_error(tmp_path: Path) -> None:
    with pytest.raises(ConfigurationError, match=r"no console accounts file .* add-user"):
        Accounts.load(tmp_path / "nope")
    with pytest.raises(ConfigurationError, match="not a regular file"):
        Accounts.load(tmp_path)


@pytest.mark.parametrize("mode", [0o640, 0o604, 0o620, 0o644, 0o660])
def test_a_file_open_to_group_or_others_is_refused(users: Path, mode: int) -> None:
    users.chmod(mode)
    with pytest.raises(ConfigurationError, match=f"mode {mode:04o}.*chmod 600"):
        Accounts.load(users)
    # add-user refuses it too, rather than quietly rewriting it.
    with pytest.raises(ConfigurationError, match="chmod 600"):
        add_account(users, "bob", PASSWORD)


def _write(path: Path, text: str | bytes) -> None:
    path.write_bytes(text.encode() if isinstance(text, str) else text)
    path.chmod(0o600)


@pytest.mark.parametrize(
    ("content", "complaint"),
    [
        ("alice\n", "line 1 .* not name:hash"),
        ("alice:\n", "line 1 .* not name:hash"),
        ("alice:bcrypt$xyz\n", "line 1 .* not name:hash"),
        ("\n\nbob:scrypt$16384$8$1$c2FsdHNhbHQ$\n", "line 3 .* not name:hash"),
        ("carol:scrypt$1000$8$1$c2FsdHNhbHRzYWx0$a2V5a2V5a2V5a2V5a2V5a2V5\n", "line 1"),
        # A cost that would take a gigabyte a sign-in is refused, not computed.
        ("dave:scrypt$1073741824$8$1$c2FsdHNhbHRzYWx0$a2V5a2V5a2V5a2V5a2V5a2V5\n", "line 1"),
        (
            "a b:scrypt$16384$8$1$c2FsdHNhbHRzYWx0$a2V5a2V5a2V5a2V5a2V5a2V5\n",
            "line 1 .*: an account name",
        ),
        (b"\xff\xfe:x\n", "not UTF-8"),
    ],
)
def test_a_malformed_file_is_one_clear_error(
    tmp_path: Path, content: str | bytes, complaint: str
) -> None:
    path = tmp_path / "users"
    _write(path, content)
    with pytest.raises(ConfigurationError, match=complaint) as raised:
        Accounts.load(path)
    assert "c2FsdH" not in raised.value.message  # a hash is never quoted back


def test_a_repeated_name_is_refused(tmp_path: Path) -> None:
    line = "alice:" + hash_password(PASSWORD) + "\n"
    path = tmp_path / "users"
    _write(path, line + line)
    with pytest.raises(ConfigurationError, match=r"line 2 .* repeats the account 'alice'"):
        Accounts.load(path)


def test_an_accounts_file_is_read_again_when_it_changes(users: Path) -> None:
    watched = AccountsFile(users)
    first = watched.current()
    assert watched.current() is first  # unchanged: not read again
    add_account(users, "bob", "bob's password")
    assert watched.current().names == ("alice", "bob")
    # Broken, it fails closed (nobody can sign in) until it is fixed.
    users.chmod(0o644)
    with pytest.raises(ConfigurationError, match="chmod 600"):
        watched.current()
    users.chmod(0o600)
    assert watched.current().check("bob", "bob's password") == "bob"
    users.unlink()
    with pytest.raises(ConfigurationError, match="no console accounts file"):
        watched.current()
