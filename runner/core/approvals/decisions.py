"""Approval requests and decisions (docs/approvals.md): what a notifier is
handed, its delivery and the backoff of its re-sends, and the check and record
of a person's decision. The tokens in the links: runner/core/approvals/approval_tokens.py.
"""

from __future__ import annotations

import asyncio
import contextvars
import functools
import inspect
import json
from collections.abc import Callable
from concurrent.futures import Executor
from datetime import timedelta
from typing import Any

from runner.core import appdb
from runner.core.agent import Agent, ApprovalRequest, Registry
from runner.core.approvals import changes
from runner.core.approvals.approval_tokens import Tokens
from runner.core.approvals.changes import ToolChange
from runner.core.errors import InvalidApprovalInput, InvalidApprovalToken
from runner.core.observe import logs
from runner.core.steps.history import approval_response
from store.models import Approval, Decision, RequestKind, RunError
from store.pg.approvals import DecisionResult
from store.postgres import PostgresStore

MAX_REASON_CHARS = 2000
# The largest edited arguments or answer a person may give, as JSON text.
MAX_VALUE_CHARS = 64_000


def backoff(attempts: int, base: float, cap: float) -> timedelta:
    """Delay before the next notification after ``attempts`` tries."""
    return timedelta(seconds=min(cap, base * 2 ** max(0, attempts - 1)))


def request_for(
    agent: Agent, run_id: str, approval: Approval, tokens: Tokens, *, root_run_id: str | None = None
) -> ApprovalRequest:
    """``root_run_id``: the top-level run of the run's tree (default: the run).

    The input and the question are redacted (the agent's ``redactor``): a
    notifier's message goes to a chat or another system. The page its link
    opens shows the person the real values, read from the store."""
    redactor = agent.redactor
    return ApprovalRequest(
        run_id=run_id,
        root_run_id=root_run_id or run_id,
        agent=agent.name,
        approval_id=approval.approval_id,
        tool_name=approval.tool_name,
        input=redactor.redact(approval.input),
        expires_at=approval.expires_at,
        token=tokens.sign(approval.approval_id, approval.token_id),
        token_id=approval.token_id,
        kind=approval.kind.value,
        question=None if approval.question is None else redactor.text(approval.question),
        schema=approval.schema,
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
        call = functools.partial(contextvars.copy_context().run, appdb.call, notifier, request)
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


def fits(schema: Any, value: Any, what: str) -> None:
    """Raise ``InvalidApprovalInput`` naming the first place where ``value``
    does not fit ``schema`` (JSON Schema, as the tool or the question gave it:
    the standard's own validator, its patterns matched in a bounded time, since
    a tool's schema may be an MCP server's: runner/core/schemas.py)."""
    import regex
    from jsonschema import Draft202012Validator, SchemaError
    from referencing.exceptions import Unresolvable

    from runner.core.schemas import InputSchema, OutOfTime, unsafe

    if not isinstance(schema, dict):
        return  # a request stored before schemas were kept: the tool checks on its run
    try:
        Draft202012Validator.check_schema(schema)
        why = unsafe(schema)
        if why is not None:
            raise InvalidApprovalInput(f"refused {what}: its schema cannot be checked ({why})")
        errors = InputSchema(schema).errors(value)
    except SchemaError as exc:
        why = exc.message[:200]
        raise InvalidApprovalInput(f"refused {what}: its schema is not valid ({why})") from None
    except regex.error as exc:
        why = str(exc)[:200]
        raise InvalidApprovalInput(
            f"refused {what}: a pattern of its schema is not valid ({why})"
        ) from None
    except Unresolvable:  # a $ref to elsewhere: nothing is fetched to check it
        raise InvalidApprovalInput(f"refused {what}: its schema refers outside itself") from None
    except OutOfTime:
        raise InvalidApprovalInput(
            f"refused {what}: its schema's patterns took too long to check it"
        ) from None
    if errors:
        first = errors[0]
        where = "/".join(str(p) for p in first.absolute_path) or "the value"
        raise InvalidApprovalInput(f"refused {what}: at {where}, {first.message}")


def check_value(value: Any, what: str) -> Any:
    """A person's arguments or answer, as they will be stored and sent: JSON
    Postgres can hold, of a bounded size. Raises ``InvalidApprovalInput``."""
    try:
        text = json.dumps(value, ensure_ascii=False, allow_nan=False)
    except (TypeError, ValueError, RecursionError):
        raise InvalidApprovalInput(f"refused {what}: not JSON (NaN, bytes, or too deep)") from None
    if len(text) > MAX_VALUE_CHARS:
        raise InvalidApprovalInput(f"refused {what}: over {MAX_VALUE_CHARS} characters as JSON")
    if _has_nul(value):
        raise InvalidApprovalInput(f"refused {what}: a NUL character")
    try:
        text.encode()
    except UnicodeEncodeError:
        raise InvalidApprovalInput(f"refused {what}: a lone surrogate") from None
    return json.loads(text)


def _has_nul(value: Any) -> bool:
    if isinstance(value, str):
        return "\x00" in value
    if isinstance(value, dict):
        return any(_has_nul(k) or _has_nul(v) for k, v in value.items())
    if isinstance(value, list):
        return any(_has_nul(v) for v in value)
    return False


def _authorized(
    store: PostgresStore, tokens: Tokens, approval_id: str, token: str | None, trusted: bool
) -> Approval:
    approval = store.get_approval(approval_id)
    if not trusted:
        if not token:
            raise InvalidApprovalToken("a token is required to decide an approval")
        if not tokens.verify(approval.approval_id, approval.token_id, token):
            raise InvalidApprovalToken(f"the token is not valid for approval {approval_id}")
    return approval


def decide(
    store: PostgresStore,
    tokens: Tokens,
    registry: Registry,
    approval_id: str,
    approve: bool,
    reason: str | None,
    *,
    token: str | None,
    trusted: bool,
    by: str | None = None,
    arguments: Any = None,
    for_run: bool = False,
    fail_run: bool = False,
) -> DecisionResult:
    """Check the token and record the decision, and ``by`` whom; the store
    checks the rest (decided once, not expired, run still waiting, a request
    of the kind that takes it) in one transaction. ``arguments``: the edited
    arguments the call runs with, checked against the tool's schema first;
    ``for_run``: the tool is approved for the rest of the run; ``fail_run``:
    the call is denied and the run ends failed, with the reason.

    A call whose tool changed since it was requested
    (runner/core/approvals/changes.py) is approved only with arguments that
    fit the tool now: its edited ones, else the model's; a call whose tool
    no longer exists is denied, or its run failed, never approved."""
    check_reason(reason)
    check_decider(by)
    if not all(isinstance(flag, bool) for flag in (approve, for_run, fail_run)):
        raise InvalidApprovalInput("approve, for_run and fail_run are True or False")
    if fail_run and approve:
        raise InvalidApprovalInput("a decision that fails the run denies the call")
    approval = _authorized(store, tokens, approval_id, token, trusted)
    change = None
    if approve or fail_run:
        change = changes.tool_change(store, registry, approval)
    if arguments is not None:
        if not isinstance(arguments, dict):
            raise InvalidApprovalInput("edited arguments must be a JSON object")
        arguments = check_value(arguments, "the edited arguments")
        if approval.kind is RequestKind.APPROVAL and change is None:
            fits(approval.schema, arguments, f"the edited arguments of {approval.tool_name}")
    if approve and change is not None:
        _fits_now(change, approval, arguments)
    failure = _failure(approval, change, reason, by) if fail_run else None
    decision = Decision.APPROVED if approve else Decision.DENIED
    return store.decide(
        approval.approval_id,
        decision,
        reason,
        approval_response,
        by=by,
        arguments=arguments,
        for_run=for_run,
        failure=failure,
    )


def _fits_now(change: ToolChange, approval: Approval, arguments: Any) -> None:
    """Approving a call whose tool changed: its arguments (a person's edit,
    else the model's) must fit the tool now. Raises ``InvalidApprovalInput``
    saying what changed."""
    changed = f"tool {change.tool} changed since the call was requested ({change.summary})"
    if change.gone:
        raise InvalidApprovalInput(f"{changed}: it cannot be approved; deny it, or fail the run")
    if arguments is not None:
        try:
            fits(change.schema, arguments, "the edited arguments")
        except InvalidApprovalInput as exc:
            raise InvalidApprovalInput(f"{changed}: {exc}") from None
        return
    try:
        fits(change.schema, approval.input, "the call's arguments")
    except InvalidApprovalInput as exc:
        raise InvalidApprovalInput(
            f"{changed}: {exc}; edit the arguments to fit it, or deny the call"
        ) from None


def _failure(
    approval: Approval, change: ToolChange | None, reason: str | None, by: str | None
) -> RunError:
    """The run's failure when a person fails it from a decision."""
    who = by or "a person"
    what = (
        f"{who} failed the run at its call of {approval.tool_name} "
        f"(approval {approval.approval_id})"
    )
    if change is not None:
        what += f": the tool changed since the call was requested ({change.summary})"
    if reason:
        what += f": {reason}"
    return RunError("tool_changed" if change is not None else "failed_by_person", what)


def answer(
    store: PostgresStore,
    tokens: Tokens,
    request_id: str,
    value: Any,
    *,
    token: str | None,
    trusted: bool,
    by: str | None = None,
) -> DecisionResult:
    """Check the token and the answer (against the question's schema: text,
    or the agent's model) and record it, ``by`` whom; the store checks the
    rest, as for a decision."""
    check_decider(by)
    request = _authorized(store, tokens, request_id, token, trusted)
    value = check_value(value, "the answer")
    if request.kind is RequestKind.INPUT:
        fits(request.schema, value, "the answer")
    return store.decide(
        request.approval_id, Decision.ANSWERED, None, approval_response, by=by, answer=value
    )
