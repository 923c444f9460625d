"""Approval requests and decisions (docs/approvals.md): what a notifier is
handed, its delivery and the backoff of its re-sends, and the check and record
of a person's decision. The tokens in the links: runner/approvals/approval_tokens.py.
"""

from __future__ import annotations

import asyncio
import contextvars
import functools
import inspect
from collections.abc import Callable
from concurrent.futures import Executor
from datetime import timedelta
from typing import Any

from runner.agent import Agent, ApprovalRequest
from runner.approvals.approval_tokens import Tokens
from runner.errors import InvalidApprovalInput, InvalidApprovalToken
from runner.observe import logs
from runner.steps.history import approval_response
from store.models import Approval, Decision
from store.pg.approvals import DecisionResult
from store.postgres import PostgresStore

MAX_REASON_CHARS = 2000


def backoff(attempts: int, base: float, cap: float) -> timedelta:
    """Delay before the next notification after ``attempts`` tries."""
    return timedelta(seconds=min(cap, base * 2 ** max(0, attempts - 1)))


def request_for(
    agent: Agent, run_id: str, approval: Approval, tokens: Tokens, *, root_run_id: str | None = None
) -> ApprovalRequest:
    """``root_run_id``: the top-level run of the run's tree (default: the run)."""
    return ApprovalRequest(
        run_id=run_id,
        root_run_id=root_run_id or run_id,
        agent=agent.name,
        approval_id=approval.approval_id,
        tool_name=approval.tool_name,
        input=approval.input,
        expires_at=approval.expires_at,
        token=tokens.sign(approval.approval_id, approval.token_id),
        token_id=approval.token_id,
    )


async def deliver(
    notifier: Callable[[ApprovalRequest], Any],
    request: ApprovalRequest,
    executor: Executor,
    *,
    step: int,
) -> None:
    """Call a notifier, sync (in a thread) or async. Raising means "not accepted".

    The notifier's own log lines name the run, as a tool's do: its run, agent
    and ``step`` (the one that asked) on top of the caller's context, which in
    an execution also holds the epoch and worker, and in tick() nothing."""
    with logs.bound(run_id=request.run_id, agent=request.agent, step=step):
        # The executor's threads do not inherit the context: the call runs in a copy.
        call = functools.partial(contextvars.copy_context().run, notifier, request)
        result = await asyncio.get_running_loop().run_in_executor(executor, call)
        if inspect.isawaitable(result):
            await result  # in this task, whose context is bound


def check_reason(reason: object) -> None:
    """A reason is stored as text and inside the checkpoint's JSON, where Postgres
    refuses NUL and the driver refuses lone surrogates: refuse them here, before
    anything is written, with one clear error."""
    if reason is None:
        return
    if not isinstance(reason, str):
        raise InvalidApprovalInput(f"the reason must be text, not {type(reason).__name__}")
    if len(reason) > MAX_REASON_CHARS:
        raise InvalidApprovalInput(f"the reason is longer than {MAX_REASON_CHARS} characters")
    if "\x00" in reason:
        raise InvalidApprovalInput("the reason contains a NUL character")
    try:
        reason.encode()
    except UnicodeEncodeError:
        raise InvalidApprovalInput(
            "the reason is not valid Unicode (it has a lone surrogate)"
        ) from None


MAX_DECIDER_CHARS = 200


def check_decider(by: object) -> None:
    """Who decided: text a person could read (a user name, an email), stored as is."""
    if by is None:
        return
    if not isinstance(by, str) or not by.strip():
        raise InvalidApprovalInput("who decided must be given as a non-empty name")
    if len(by) > MAX_DECIDER_CHARS or not by.isprintable():
        raise InvalidApprovalInput(
            f"who decided must be printable text of at most {MAX_DECIDER_CHARS} characters"
        )


def decide(
    store: PostgresStore,
    tokens: Tokens,
    approval_id: str,
    approve: bool,
    reason: str | None,
    *,
    token: str | None,
    trusted: bool,
    by: str | None = None,
) -> DecisionResult:
    """Check the token and record the decision, and ``by`` whom; the store
    checks the rest (decided once, not expired, run still waiting) in one
    transaction."""
    check_reason(reason)
    check_decider(by)
    approval = store.get_approval(approval_id)
    if not trusted:
        if not token:
            raise InvalidApprovalToken("a token is required to decide an approval")
        if not tokens.verify(approval.approval_id, approval.token_id, token):
            raise InvalidApprovalToken(f"the token is not valid for approval {approval_id}")
    response = approval_response(approval.approval_id, approval.tool_call_id, approve, reason)
    decision = Decision.APPROVED if approve else Decision.DENIED
    return store.decide(approval.approval_id, decision, reason, response, by=by)
