"""``runwright console``: the web console on its own, with its own sign-in
(docs/console-standalone.md), and ``runwright console add-user``.

Only click is imported when the CLI starts; the server, the engine and the
accounts when a command runs.
"""

from __future__ import annotations

import ipaddress
import logging
import sys
from pathlib import Path

import click

from runner.cli.terminal import inert
from runner.core.errors import ConfigurationError, InvalidInput

DEFAULT_PORT = 8765
USERS_FILE = "console-users"


def default_users_file() -> Path:
    """Where the accounts are kept unless ``--users`` says: the user's
    configuration directory (``~/.config/runwright/console-users`` on Linux)."""
    return Path(click.get_app_dir("runwright")) / USERS_FILE


def is_loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False


_USERS_HELP = "The accounts file (default: ~/.config/runwright/console-users)."


def _users_option(path: Path | None) -> Path:
    return path if path is not None else default_users_file()


@click.group("console", invoke_without_command=True)
@click.option("--host", default="127.0.0.1", show_default=True, help="The address to listen on.")
@click.option(
    "--port",
    default=DEFAULT_PORT,
    show_default=True,
    type=click.IntRange(0, 65535),
    help="The port (0: any free one, printed).",
)
@click.option("--users", type=click.Path(dir_okay=False, path_type=Path), help=_USERS_HELP)
@click.option("--prefix", default="", help="Serve under this path (e.g. /console, behind a proxy).")
@click.option(
    "--secure-cookies", is_flag=True, help="Mark cookies Secure (when served through HTTPS)."
)
@click.pass_context
def console(
    ctx: click.Context,
    host: str,
    port: int,
    users: Path | None,
    prefix: str,
    secure_cookies: bool,
) -> None:
    """Serve the web console: runs, run timelines, the approvals inbox.
    Sign-in accounts come from a file: add one with `runwright console add-user`."""
    ctx.ensure_object(dict)["users"] = users
    if ctx.invoked_subcommand is not None:
        return
    from runner.console.accounts import AccountsFile
    from runner.console.standalone import StandaloneConsole
    from runner.console.wsgi import check_prefix

    if not host or not host.isascii() or not host.isprintable() or " " in host:
        raise InvalidInput("--host is an IP address or a host name")
    prefix = check_prefix(prefix)
    path = _users_option(users)
    accounts = AccountsFile(path)
    if len(accounts.current()) == 0:
        raise ConfigurationError(
            f"the console accounts file {path} has no accounts: add one with "
            f"`runwright console add-user NAME --users {path}`"
        )
    from runner.console.server import make_server, serve_on
    from runner.core.engine.engine import Engine

    engine = Engine.from_env()
    try:
        secret_key = engine.settings.secret_key
        if not secret_key:
            raise ConfigurationError("RUNWRIGHT_SECRET_KEY is not set: the console signs with it")
        app = StandaloneConsole(
            engine,
            accounts=accounts,
            secret_key=secret_key,
            prefix=prefix,
            secure_cookies=secure_cookies,
        )
        try:
            server = make_server(app, host, port)
        except OSError as exc:
            raise ConfigurationError(
                f"cannot listen on {host}:{port}: {exc.strerror or exc}"
            ) from None
        if not logging.getLogger().handlers:
            logging.basicConfig(
                level=logging.INFO, stream=sys.stderr, format="%(asctime)s %(message)s"
            )
        if not is_loopback(host):
            click.echo(
                f"warning: the console serves plain HTTP on {host}, which is not loopback: "
                "put it behind a TLS proxy (and pass --secure-cookies)",
                err=True,
            )

        def ready(bound_host: str, bound_port: int) -> None:
            shown = f"[{bound_host}]" if ":" in bound_host else bound_host
            click.echo(
                f"console at http://{shown}:{bound_port}{prefix}/ (accounts: {inert(str(path))})"
            )

        serve_on(server, ready=ready)
        click.echo("console stopped")
    finally:
        engine.close()


@console.command("add-user")
@click.argument("name")
@click.option("--users", type=click.Path(dir_okay=False, path_type=Path), help=_USERS_HELP)
@click.option(
    "--password-stdin", is_flag=True, help="Read the password from the first line of stdin."
)
@click.option(
    "--role",
    help="viewer (sees runs), reader (and their payloads) or approver (and decides). "
    "A new account without one may do everything; an existing one keeps its own.",
)
@click.pass_context
def add_user(
    ctx: click.Context, name: str, users: Path | None, password_stdin: bool, role: str | None
) -> None:
    """Add the account NAME, or set its password (which ends its sessions)."""
    from runner.console.abilities import parse_role
    from runner.console.accounts import add_account, check_name, check_password

    check_name(name)
    given = None if role is None else parse_role(role)  # before the password is asked
    path = _users_option(users or ctx.obj.get("users"))
    if password_stdin:
        line = sys.stdin.readline()
        if not line:
            raise InvalidInput("--password-stdin: stdin is empty")
        password = line.removesuffix("\n").removesuffix("\r")
    else:
        password = click.prompt(
            f"Password for {name}", hide_input=True, confirmation_prompt=True, type=str
        )
    check_password(password)
    replaced = add_account(path, name, password, given)
    where = inert(str(path))
    said = "" if given is None else f", role {given.value}"
    if replaced:
        click.echo(f"password of {name} set in {where}{said}; its sessions end")
    else:
        click.echo(f"account {name} added to {where}{said}")
