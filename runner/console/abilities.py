"""Who may see what in the console (docs/security.md, "Roles"): three
abilities, and the roles of the standalone console's accounts file.

- ``see_runs``: the runs, their statuses, timings, costs and names;
- ``see_payloads``: what runs carry (trigger payloads, messages, tool
  arguments and results, answers, outputs, error messages); without it the
  pages and the event stream show their shape with every value masked
  (runner/console/masking.py), and nothing is recorded as viewed;
- ``decide``: approve, edit, answer, deny, cancel, retry, and record what
  an effect of unknown outcome did; without it the forms are not shown and
  their POSTs are refused.

Each adapter resolves a request to a set of abilities: the standalone console
from the account's role, the Flask blueprint with a callable the app passes,
the Django views from the user's permissions. An approval link is none of
these: its token opens the one request it decides, payload included.
"""

from __future__ import annotations

import enum

from runner.core.errors import InvalidInput


class Ability(enum.StrEnum):
    SEE_RUNS = "see_runs"
    SEE_PAYLOADS = "see_payloads"
    DECIDE = "decide"


EVERY_ABILITY = frozenset(Ability)


class Role(enum.StrEnum):
    """A role of an account in the standalone console's accounts file
    (persisted there by name)."""

    VIEWER = "viewer"
    READER = "reader"
    APPROVER = "approver"


ROLE_ABILITIES: dict[Role, frozenset[Ability]] = {
    Role.VIEWER: frozenset({Ability.SEE_RUNS}),
    Role.READER: frozenset({Ability.SEE_RUNS, Ability.SEE_PAYLOADS}),
    Role.APPROVER: EVERY_ABILITY,
}


def parse_role(text: str) -> Role:
    """The role named ``text``; anything else is one :class:`InvalidInput`
    that lists the roles."""
    try:
        return Role(text)
    except ValueError:
        names = ", ".join(role.value for role in Role)
        raise InvalidInput(f"a role is one of {names}") from None


def abilities_of(role: Role | None) -> frozenset[Ability]:
    """What an account of ``role`` may do; an account without one (a line
    written before roles) may do everything, as it could then."""
    return EVERY_ABILITY if role is None else ROLE_ABILITIES[role]


__all__ = ["EVERY_ABILITY", "ROLE_ABILITIES", "Ability", "Role", "abilities_of", "parse_role"]
