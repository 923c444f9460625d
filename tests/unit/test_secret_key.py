"""``RUNWRIGHT_SECRET_KEY``: the key syntax is unambiguous for every common
encoding of a random secret, and a weak or empty setting is refused."""

from __future__ import annotations

import base64
import hashlib
import hmac
import os
import re
from pathlib import Path

import pytest

from runner import ConfigurationError, InvalidInput, RunwrightError
from runner.core.approvals.approval_tokens import Tokens
from store.local import LocalStack

APPROVAL_ID = "0190a5f2-0000-7000-8000-000000000001"


def token_with(secret: bytes, approval_id: str = APPROVAL_ID) -> str:
    """A token computed by someone who knows (or guessed) ``secret``."""
    digest = hmac.new(secret, approval_id.encode(), hashlib.sha256).digest()
    return base64.urlsafe_b64encode(digest).rstrip(b"=").decode()


def padded_base64() -> str:
    """What ``openssl rand -base64 N`` prints when N % 3 == 1: ends in ``==``."""
    made = base64.b64encode(os.urandom(40)).decode()
    assert made.endswith("==")
    return made


def test_a_bare_base64_secret_is_taken_whole_and_the_padding_cannot_forge() -> None:
    secret = padded_base64()
    tokens = Tokens.parse(secret)
    assert tokens.current_id == "default"
    # The reported forgery: the setting read as id "<prefix>" with secret "=".
    forged = token_with(b"=")
    assert not tokens.verify(APPROVAL_ID, "default", forged)
    assert not tokens.verify(APPROVAL_ID, secret.rstrip("="), forged)
    assert tokens.verify(APPROVAL_ID, "default", token_with(secret.encode()))


@pytest.mark.parametrize(
    "secret",
    [
        base64.b64encode(b"\xfb\xff" + os.urandom(40)).decode(),  # has "+", "/" and "=="
        base64.urlsafe_b64encode(b"\xfb\xff" + os.urandom(40)).decode(),  # "-", "_", "=="
        os.urandom(32).hex(),
    ],
    ids=["base64", "urlsafe-base64", "hex"],
)
def test_no_encoding_of_a_secret_is_split(secret: str) -> None:
    bare = Tokens.parse(secret)
    assert bare.current_id == "default"
    assert bare.sign(APPROVAL_ID) == token_with(secret.encode())
    named = Tokens.parse(f"k2:{secret},k1:{secret[::-1]}")
    assert named.current_id == "k2"
    assert named.sign(APPROVAL_ID) == token_with(secret.encode())
    assert named.verify(APPROVAL_ID, "k1", token_with(secret[::-1].encode()))


def test_rotation_signs_with_the_first_and_verifies_with_all() -> None:
    new, old = "n" * 32, "o" * 32
    before = Tokens.parse(f"k1:{old}")
    after = Tokens.parse(f" k2 : {new} , k1:{old}\n")
    assert after.current_id == "k2"
    assert after.verify(APPROVAL_ID, "k1", before.sign(APPROVAL_ID))
    assert after.sign(APPROVAL_ID) == token_with(new.encode())
    # With an id the secret is everything after the first colon.
    assert Tokens.parse("k1:" + "a:b" * 11).sign(APPROVAL_ID) == token_with(b"a:b" * 11)


@pytest.mark.parametrize(
    ("setting", "message"),
    [
        (",", "entry 1 is empty"),
        (" , ,", "entry 1 is empty"),
        ("   ", "entry 1 is empty"),
        ("\n\t", "entry 1 is empty"),
        ("k1:" + "s" * 32 + ",", "entry 2 is empty"),
        ("s" * 31, "entry 1: the secret is 31 bytes; at least 32"),
        ("k1:" + "s" * 32 + ",k2:" + "s" * 31, "entry 2: the secret is 31 bytes"),
        ("k1:", "the secret is 0 bytes"),
        (base64.b64encode(bytes(range(16))).decode(), "is 24 bytes"),  # openssl rand -base64 16
        ("k1=" + "s" * 40, "id:secret (a colon, not '=')"),  # the old syntax
        ("test=test-secret", "id:secret (a colon, not '=')"),
        (":" + "s" * 32, "a key id is"),
        ("a key:" + "s" * 32, "a key id is"),
        ("k1:" + "s" * 32 + ",k1:" + "t" * 32, "lists the key id 'k1' twice"),
        ("k1:" + "\ud800" * 32, "not valid UTF-8"),
    ],
)
def test_a_weak_or_malformed_setting_is_a_configuration_error(setting: str, message: str) -> None:
    with pytest.raises(ConfigurationError, match=re.escape(message)) as raised:
        Tokens.parse(setting)
    # The message names the entry, never the text of a secret.
    assert "sss" not in raised.value.message and "test-secret" not in raised.value.message


def test_configuration_error_is_its_own_error() -> None:
    assert issubclass(ConfigurationError, RunwrightError)
    assert not issubclass(ConfigurationError, InvalidInput)
    from runner.core.errors import ConfigurationError as from_errors
    from store.errors import ConfigurationError as from_store

    assert ConfigurationError is from_errors is from_store


def test_unset_still_means_a_key_of_this_process() -> None:
    first, second = Tokens.parse(None), Tokens.parse("")
    assert first.current_id == second.current_id == "ephemeral"
    assert first.sign(APPROVAL_ID) != second.sign(APPROVAL_ID)


def test_a_malformed_token_is_not_valid_rather_than_a_type_error() -> None:
    tokens = Tokens.parse("k1:" + "s" * 32)
    for token in ["é" * 43, "\ud800", "\x00", "", "x" * 100_000, None, 42]:
        assert not tokens.verify(APPROVAL_ID, "k1", token)


def test_the_local_stack_key_is_valid_and_an_old_one_is_carried_over(tmp_path: Path) -> None:
    stack = LocalStack(tmp_path / "fresh")
    key = stack.secret_key()
    assert key.startswith("local:") and Tokens.parse(key).current_id == "local"

    # A key file written by an earlier version, with approvals signed by it waiting.
    old_home = tmp_path / "old"
    old_home.mkdir()
    secret = "s" * 43
    (old_home / "secret_key").write_text(f"local={secret}\n")
    before = token_with(secret.encode())
    carried = LocalStack(old_home).secret_key()
    assert carried == f"local:{secret}"
    assert Tokens.parse(carried).verify(APPROVAL_ID, "local", before)
    assert LocalStack(old_home).secret_key() == carried
