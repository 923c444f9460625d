"""Roles in the standalone console's accounts file (runner/console/accounts.py,
runner/console/abilities.py): a line may end with a role, a line without one
(as files were written before roles) may do everything, an unknown role is
one clear error that leaves the file as it was; and the standalone console
gives each signed-in account its role's abilities."""

from __future__ import annotations

from pathlib import Path

import pytest
from werkzeug.test import Client

from runner import Engine
from runner.console.abilities import EVERY_ABILITY, Ability, Role
from runner.console.accounts import Accounts, AccountsFile, add_account
from runner.console.masking import MASK
from runner.console.standalone import StandaloneConsole
from runner.core.audit import AuditAction
from runner.core.errors import ConfigurationError, InvalidInput
from runner.core.settings import Settings
from tests.console.conftest import csrf_of, waiting_run
from tests.helpers import snapshot

BASE = "/console"
PASSWORD = "a long enough password"


def test_a_line_may_carry_a_role_and_one_without_may_do_everything(tmp_path: Path) -> None:
    path = tmp_path / "users"
    add_account(path, "old", PASSWORD)  # as before roles: name:hash
    add_account(path, "vera", PASSWORD, role="viewer")
    add_account(path, "rita", PASSWORD, role=Role.READER)
    add_account(path, "ann", PASSWORD, role="approver")
    lines = path.read_text().splitlines()
    assert lines[0].count(":") == 1 and lines[1].endswith(":viewer")
    found = Accounts.load(path)
    assert found.role("old") is None and found.abilities("old") == EVERY_ABILITY
    assert found.abilities("vera") == {Ability.SEE_RUNS}
    assert found.abilities("rita") == {Ability.SEE_RUNS, Ability.SEE_PAYLOADS}
    assert found.abilities("ann") == EVERY_ABILITY
    assert found.abilities("nobody") == frozenset()
    assert found.check("vera", PASSWORD) == "vera"  # the role is no part of the hash

    # A new password keeps the role; a role given replaces it.
    add_account(path, "vera", "another long password")
    assert Accounts.load(path).role("vera") is Role.VIEWER
    add_account(path, "vera", "another long password", role="reader")
    assert Accounts.load(path).role("vera") is Role.READER


def test_an_unknown_role_is_one_clear_error_and_the_file_is_unchanged(tmp_path: Path) -> None:
    path = tmp_path / "users"
    add_account(path, "vera", PASSWORD, role="viewer")
    before = path.read_bytes()
    for role in ("admin", "Viewer", "", "viewer "):
        with pytest.raises(InvalidInput, match="a role is one of viewer, reader, approver"):
            add_account(path, "vera", PASSWORD, role=role)
        with pytest.raises(InvalidInput):
            add_account(path, "new", PASSWORD, role=role)
    assert path.read_bytes() == before

    # A file edited by hand with an unknown role names the line, not its hash.
    path.write_text(before.decode().replace(":viewer", ":root"))
    with pytest.raises(ConfigurationError, match=r"line 1 of .*a role is one of") as refused:
        AccountsFile(path).current()
    assert "scrypt" not in str(refused.value)


def test_the_standalone_console_gives_each_account_its_roles_abilities(
    engine: Engine, queued: list[str], settings: Settings, tmp_path: Path
) -> None:
    users = tmp_path / "users"
    add_account(users, "vera", PASSWORD, role="viewer")
    add_account(users, "old", PASSWORD)
    assert settings.secret_key
    app = StandaloneConsole(engine, accounts=users, secret_key=settings.secret_key, prefix=BASE)
    _, run, approval = waiting_run(engine, queued, payload={"customer": "Ada Lovelace"})

    def signed_in(name: str) -> Client:
        client = Client(app)
        login = client.get(f"{BASE}/login")
        form = {"name": name, "password": PASSWORD, "csrf_token": csrf_of(login.text)}
        assert client.post(f"{BASE}/login", data=form).status_code == 303
        return client

    vera = signed_in("vera")
    page = vera.get(f"{BASE}/runs/{run.id}").text
    assert MASK in page and "Ada Lovelace" not in page and 'id="cancel"' not in page
    before = snapshot(engine.store)
    refused = vera.post(
        f"{BASE}/approvals/{approval.approval_id}",
        data={"decision": "approve", "csrf_token": csrf_of(page)},  # the sign-out form's token
    )
    assert refused.status_code == 403 and "may not decide" in refused.text
    assert snapshot(engine.store) == before

    # A line without a role: everything, as before roles.
    page = signed_in("old").get(f"{BASE}/runs/{run.id}").text
    assert "Ada Lovelace" in page and 'id="cancel"' in page
    viewed = [e.actor for e in engine.audit_log() if e.action == AuditAction.VIEWED_PAYLOADS]
    assert viewed == ["old"]

    # A role changed in the file (by hand: add-user sets a new password, which
    # ends the account's sessions) holds from the session's next request.
    users.write_text(users.read_text().replace(":viewer", ":reader"))
    assert "Ada Lovelace" in vera.get(f"{BASE}/runs/{run.id}").text
