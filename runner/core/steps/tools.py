"""Tools: typed Python functions the model may call.

``@tool`` builds the JSON schema from the type hints (through pydantic) and the
description from the docstring. ``@effect`` marks a tool with side effects: each
call is journaled under the idempotency key ``f"{run_id}:{tool_call_id}"``,
which the function receives if it has an ``idempotency_key`` parameter.

``retries`` (an int, or a :class:`~runner.core.retry.RetryPolicy`) tries a raising
tool again, with backoff, before its error goes back to the model. An effect
may be retried only if it is ``retry="at_least_once"``: every retry runs it
again, under the same idempotency key.
"""

from __future__ import annotations

import asyncio
import contextvars
import functools
import inspect
import json
import logging
import re
import typing
from collections.abc import Callable
from concurrent.futures import CancelledError, Executor
from dataclasses import dataclass
from typing import Any, Literal, overload

import pydantic

from runner.core import appdb
from runner.core.errors import InvalidInput, ToolDefinitionError, ToolInputError
from runner.core.retry import RetryPolicy
from runner.core.runtime import DaemonThreadPool
from runner.core.steps.run_context import RunContext

Retry = Literal["at_most_once", "at_least_once"]
Retries = int | RetryPolicy | None
IDEMPOTENCY_KEY = "idempotency_key"
# What every provider takes as a function name: the rule for the names of the
# tools the engine makes (an MCP server's, an agent's as a tool).
FUNCTION_NAME = re.compile(r"[A-Za-z0-9_-]{1,64}")
log = logging.getLogger(__name__)


def _retry_policy(name: str, retries: Retries, *, effect: bool, retry: Retry) -> RetryPolicy | None:
    """The policy ``retries`` asks for, or None if the tool is never retried."""
    if retries is None:
        return None
    if isinstance(retries, RetryPolicy):
        policy = retries
    elif isinstance(retries, int) and not isinstance(retries, bool):
        try:
            policy = RetryPolicy.attempts(retries)
        except InvalidInput as exc:
            raise ToolDefinitionError(f"{name}: {exc}") from None
    else:
        raise ToolDefinitionError(
            f"{name}: retries must be an int or a RetryPolicy, not {type(retries).__name__}"
        )
    if policy.max_attempts == 1:
        return None
    if effect and retry != "at_least_once":
        # An at-most-once effect promises to run once at most; a retry would
        # run it again without its journal saying so.
        raise ToolDefinitionError(
            f"{name}: an effect can be retried only if it is declared "
            f'retry="at_least_once"; add that, or drop retries'
        )
    return policy


@dataclass(frozen=True)
class Reconciled:
    """What an effect's ``reconcile`` callable found out about a call whose
    execution died before recording it: it took place (with the result to
    record), or it did not. Make one with :func:`done` or :func:`not_done`."""

    took_place: bool
    result: Any = None


def done(result: Any = None) -> Reconciled:
    """The effect took place; ``result`` is what the call would have returned."""
    return Reconciled(True, result)


def not_done() -> Reconciled:
    """The effect did not take place."""
    return Reconciled(False)


# Asked, with the call's idempotency key, what became of an effect of unknown
# outcome: a Reconciled, or None if it cannot tell (a person must then).
Reconcile = Callable[[str], "Reconciled | None"]


class Tool:
    """A callable the model can use. Build one with :func:`tool` or :func:`effect`."""

    def __init__(
        self,
        fn: Callable[..., Any],
        *,
        name: str,
        description: str,
        params: type[pydantic.BaseModel],
        effect: bool = False,
        retry: Retry = "at_most_once",
        ctx_param: str | None = None,
        key_param: str | None = None,
        retries: Retries = None,
        reconcile: Reconcile | None = None,
    ) -> None:
        if retry not in ("at_most_once", "at_least_once"):
            raise ToolDefinitionError(
                f"retry must be 'at_most_once' or 'at_least_once', not {retry!r}"
            )
        self.retries = _retry_policy(name, retries, effect=effect, retry=retry)
        self.fn = fn
        self.name = name
        self.description = description
        self.params = params
        self.effect = effect
        self.retry: Retry = retry
        self.ctx_param = ctx_param
        self.key_param = key_param
        if reconcile is not None and not (effect and callable(reconcile)):
            raise ToolDefinitionError(f"{name}: reconcile is a callable, and only for an effect")
        self.reconcile = reconcile
        self.is_async = inspect.iscoroutinefunction(fn)
        self._schema: dict[str, Any] | None = None
        # The MCP server the tool is from (runner/core/mcp/tools.py), None for a function.
        self.mcp_server: str | None = None

    def __repr__(self) -> str:
        kind = "effect" if self.effect else "tool"
        return f"<{kind} {self.name}>"

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        """Call the underlying function directly (handy in unit tests)."""
        return self.fn(*args, **kwargs)

    def schema(self) -> dict[str, Any]:
        """The tool in OpenAI's function-calling format, as litellm expects it."""
        if self._schema is None:
            parameters = self.params.model_json_schema()
            parameters.pop("title", None)
            self._schema = {
                "type": "function",
                "function": {
                    "name": self.name,
                    "description": self.description,
                    "parameters": parameters,
                },
            }
        return self._schema

    def about(self) -> dict[str, Any] | None:
        """What a reviewer should see of the tool beyond its name and the
        call's arguments (None for a Python tool; an MCP tool's server,
        description and annotations)."""
        return None

    def retryable(self, exc: Exception) -> bool:
        """Whether ``exc``, raised by this tool, is worth another attempt (the
        policy permitting). Unusable arguments never are, nor a cancellation."""
        if self.retries is None or isinstance(exc, ToolInputError | CancelledError):
            return False
        if self.retries.transient is None:
            return True
        try:
            return bool(self.retries.transient(exc))
        except Exception:
            log.exception("%s: the retry policy's transient predicate raised", self.name)
            return False

    def parse(self, arguments: str | dict[str, Any] | None) -> pydantic.BaseModel:
        if arguments is None or arguments == "":
            data: Any = {}
        elif isinstance(arguments, str):
            try:
                data = json.loads(arguments)
            except json.JSONDecodeError as exc:
                raise ToolInputError(f"arguments are not valid JSON: {exc}") from None
        else:
            data = arguments
        if not isinstance(data, dict):
            raise ToolInputError("arguments must be a JSON object")
        try:
            return self.params.model_validate(data)
        except pydantic.ValidationError as exc:
            raise ToolInputError(f"invalid arguments for {self.name}: {exc}") from None

    async def invoke(
        self,
        args: pydantic.BaseModel,
        ctx: RunContext,
        *,
        idempotency_key: str | None = None,
        executor: Executor | None = None,
    ) -> Any:
        kwargs = {name: getattr(args, name) for name in type(args).model_fields}
        if self.ctx_param:
            kwargs[self.ctx_param] = ctx
        if self.key_param:
            kwargs[self.key_param] = idempotency_key
        if self.is_async:
            return await self.fn(**kwargs)
        loop = asyncio.get_running_loop()
        call = functools.partial(contextvars.copy_context().run, appdb.call, self.fn, **kwargs)
        if isinstance(executor, DaemonThreadPool):
            return await executor.call(loop, call)  # the runtime's tool pool: one hop
        return await loop.run_in_executor(executor, call)


def _build(
    fn: Callable[..., Any],
    *,
    name: str | None,
    description: str | None,
    effect: bool,
    retry: Retry,
    retries: Retries,
    reconcile: Reconcile | None = None,
) -> Tool:
    if not callable(fn):
        raise ToolDefinitionError(f"{fn!r} is not a function")
    tool_name = name or fn.__name__
    try:
        hints = typing.get_type_hints(fn, include_extras=True)
    except Exception as exc:
        raise ToolDefinitionError(f"cannot read the type hints of {tool_name}: {exc}") from exc
    fields: dict[str, Any] = {}
    ctx_param = key_param = None
    for param in inspect.signature(fn).parameters.values():
        if param.kind in (param.VAR_POSITIONAL, param.VAR_KEYWORD):
            raise ToolDefinitionError(
                f"{tool_name}: *args and **kwargs cannot be described to a model"
            )
        annotation = hints.get(param.name, Any)
        if annotation is RunContext:
            ctx_param = param.name
            continue
        if effect and param.name == IDEMPOTENCY_KEY:
            key_param = param.name
            continue
        default = ... if param.default is inspect.Parameter.empty else param.default
        fields[param.name] = (annotation, default)
    params = pydantic.create_model(
        f"{tool_name}_arguments",
        __config__=pydantic.ConfigDict(extra="forbid"),
        **fields,
    )
    doc = description if description is not None else inspect.getdoc(fn) or ""
    return Tool(
        fn,
        name=tool_name,
        description=doc.strip() or tool_name,
        params=params,
        effect=effect,
        retry=retry,
        ctx_param=ctx_param,
        key_param=key_param,
        retries=retries,
        reconcile=reconcile,
    )


@overload
def tool(fn: Callable[..., Any], /) -> Tool: ...
@overload
def tool(
    *, name: str | None = None, description: str | None = None, retries: Retries = None
) -> Callable[[Callable[..., Any]], Tool]: ...
def tool(
    fn: Callable[..., Any] | None = None,
    /,
    *,
    name: str | None = None,
    description: str | None = None,
    retries: Retries = None,
) -> Tool | Callable[[Callable[..., Any]], Tool]:
    """Turn a typed function (sync or async) into a tool.

    ``retries``: ``n`` more attempts after the first, half a second apart at
    first (:meth:`RetryPolicy.attempts`), or a :class:`RetryPolicy`, whose
    ``transient`` predicate, if set, picks the exceptions worth retrying (by
    default, every exception the tool raises but :class:`ToolInputError`).
    """

    def wrap(f: Callable[..., Any]) -> Tool:
        return _build(
            f,
            name=name,
            description=description,
            effect=False,
            retry="at_most_once",
            retries=retries,
        )

    return wrap(fn) if fn is not None else wrap


@overload
def effect(fn: Callable[..., Any], /) -> Tool: ...
@overload
def effect(
    *,
    name: str | None = None,
    description: str | None = None,
    retry: Retry = "at_most_once",
    retries: Retries = None,
    reconcile: Reconcile | None = None,
) -> Callable[[Callable[..., Any]], Tool]: ...
def effect(
    fn: Callable[..., Any] | None = None,
    /,
    *,
    name: str | None = None,
    description: str | None = None,
    retry: Retry = "at_most_once",
    retries: Retries = None,
    reconcile: Reconcile | None = None,
) -> Tool | Callable[[Callable[..., Any]], Tool]:
    """A tool with side effects, journaled so that a completed call never runs twice.

    A call that started but never recorded its result (the process died) is not
    run again unless ``retry="at_least_once"``; the model is told its outcome is
    unknown instead, and the run is flagged ``needs_attention`` until a person
    resolves it (``Engine.resolve_effect``). With ``reconcile``, the engine
    first asks it, with the call's idempotency key, what became of the call:
    :func:`done` (with the result to record) or :func:`not_done` is the
    outcome, the model is told it, and no person is needed; None (or an
    exception) leaves the outcome unknown.

    ``retries`` (as for :func:`tool`) needs ``retry="at_least_once"``: a retry
    runs the effect again, with the same idempotency key, and its journal entry
    records one outcome, the last attempt's.
    """

    def wrap(f: Callable[..., Any]) -> Tool:
        return _build(
            f,
            name=name,
            description=description,
            effect=True,
            retry=retry,
            retries=retries,
            reconcile=reconcile,
        )

    return wrap(fn) if fn is not None else wrap
