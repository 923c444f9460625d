"""The key ring of encryption at rest (runner/core/keyring.py): sealed values
open only under their key and their row and column; a wrong or missing key is
one error naming the key id, never the key; rotation loses nothing."""

from __future__ import annotations

import base64

import pytest

from runner.core.errors import ConfigurationError, InvalidInput
from runner.core.keyring import CannotDecrypt, KeyRing, binding, key_of, new_key

ROW = binding("messages", "body", "01a2-run", 7)


def ring(*ids: str) -> tuple[KeyRing, dict[str, str]]:
    keys = {key_id: new_key() for key_id in ids}
    return KeyRing.parse(",".join(f"{k}:{v}" for k, v in keys.items())), keys


def test_a_sealed_value_opens_under_its_row_and_column_only() -> None:
    keys, _ = ring("k1")
    sealed = keys.seal(b'{"email": "a@example.com"}', ROW)
    assert sealed.startswith("rw1:k1:") and b"example" not in sealed.encode()
    assert keys.open(sealed, ROW) == b'{"email": "a@example.com"}'
    assert keys.seal(b"x", ROW) != keys.seal(b"x", ROW)  # a fresh nonce each time
    for elsewhere in (
        binding("messages", "body", "01a2-run", 8),  # another row
        binding("steps", "output", "01a2-run", 7),  # another column
    ):
        with pytest.raises(CannotDecrypt, match="key 'k1' does not open: it was altered"):
            keys.open(sealed, elsewhere)


def test_an_altered_value_or_a_missing_key_is_one_error_naming_the_key_id() -> None:
    old, _ = ring("k1")
    sealed = old.seal(b"payload", ROW)
    raw = bytearray(base64.b64decode(sealed.split(":", 2)[2]))
    raw[-1] ^= 1
    altered = "rw1:k1:" + base64.b64encode(bytes(raw)).decode()
    with pytest.raises(CannotDecrypt, match="'k1' does not open"):
        old.open(altered, ROW)
    other, _ = ring("k2")
    with pytest.raises(CannotDecrypt, match=r"sealed under key 'k1', which .* holds k2"):
        other.open(sealed, ROW)
    with pytest.raises(CannotDecrypt, match="not one Runwright sealed"):
        other.open("plain text", ROW)
    with pytest.raises(CannotDecrypt, match="'k1' is not base64"):
        old.open("rw1:k1:***", ROW)


def test_rotation_reseals_under_the_first_key_and_the_old_key_can_go() -> None:
    before, keys = ring("old")
    sealed = before.seal(b"kept", ROW)
    fresh = new_key()
    both = KeyRing.parse(f"new:{fresh},old:{keys['old']}")
    assert both.current == "new" and both.open(sealed, ROW) == b"kept"
    moved = both.reseal(sealed, ROW)
    assert key_of(moved) == "new" and both.reseal(moved, ROW) == moved
    after = KeyRing.parse(f"new:{fresh}")  # the old key removed: nothing lost
    assert after.open(moved, ROW) == b"kept"


@pytest.mark.parametrize(
    ("text", "says"),
    [
        ("k1", "entry 1 is not id:base64-key"),
        ("bad id:AAAA", "entry 1 is not id:base64-key"),
        ("k1:!!!!", "key 'k1' is not base64"),
        ("k1:" + base64.b64encode(b"short").decode(), "key 'k1' is 5 bytes, not 32"),
    ],
)
def test_a_malformed_ring_is_one_clear_error_that_never_shows_a_key(text: str, says: str) -> None:
    with pytest.raises(ConfigurationError, match=says) as refused:
        KeyRing.parse(text)
    assert "!!!!" not in str(refused.value) and "c2hvcnQ" not in str(refused.value)


def test_a_key_given_twice_is_refused_and_the_ring_never_prints_its_keys() -> None:
    key = new_key()
    with pytest.raises(ConfigurationError, match="key 'k1' is given twice"):
        KeyRing.parse(f"k1:{key},k1:{new_key()}")
    keys = KeyRing.parse(f"k1:{key}")
    assert repr(keys) == "KeyRing(k1)" and key not in repr(keys) and key not in str(keys)


def test_key_of_reads_only_sealed_values_and_a_binding_names_its_place() -> None:
    assert key_of("rw1:k9:abc") == "k9"
    assert key_of("rw1:bad id:abc") is None and key_of({"x": 1}) is None and key_of("hi") is None
    assert binding("runs", "trigger", "r1") == b"runwright|runs|trigger|r1"
    with pytest.raises(InvalidInput):
        binding("runs|x", "trigger", "r1")
