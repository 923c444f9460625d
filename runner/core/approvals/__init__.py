"""Approvals: a tool call that waits for a person (docs/approvals.md).

- ``decisions.py``: what a notifier is handed and its delivery, and the check
  and record of a decision.
- ``approval_tokens.py``: the signed tokens of approval links, and their keys.
- ``inbox.py``: what waits for a person, with what they need to judge it.
- ``changes.py``: how the tool of a waiting call changed since it was
  requested, as a decision will be applied.
- ``expiry.py``: how an approval nobody decided in time reads, told apart
  from a person's denial.

The notifiers that ship with Runwright are ``runner/notifiers.py`` (a public
import path).
"""
