"""Tools: typed Python functions the model may call.

``@tool`` builds the JSON schema from the type hints (through pydantic) and the
description from the docstring. ``@effect`` marks a tool with side effects: each
call is journaled under the idempotency key ``f"{run_id}:{tool_call_id}"``,
which the function receives if it has an ``idempotency_key`` parameter.
"""

from __future__ import annotations

import asyncio
import contextvars
import functools
import inspect
import json
import typing
from collections.abc import Callable
from concurrent.futures import Executor
from typing import Any, Literal, overload

import pydantic

from runner.context import RunContext
from runner.errors import ToolDefinitionError, ToolInputError

Retry = Literal["at_most_once", "at_least_once"]
IDEMPOTENCY_KEY = "idempotency_key"


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
    ) -> None:
        if retry not in ("at_most_once", "at_least_once"):
            raise ToolDefinitionError(
                f"retry must be 'at_most_once' or 'at_least_once', not {retry!r}"
            )
        self.fn = fn
        self.name = name
        self.description = description
        self.params = params
        self.effect = effect
        self.retry: Retry = retry
        self.ctx_param = ctx_param
        self.key_param = key_param
        self.is_async = inspect.iscoroutinefunction(fn)
        self._schema: dict[str, Any] | None = None

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
        call = functools.partial(contextvars.copy_context().run, self.fn, **kwargs)
        return await loop.run_in_executor(executor, call)


def _build(
    fn: Callable[..., Any],
    *,
    name: str | None,
    description: str | None,
    effect: bool,
    retry: Retry,
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
    )


@overload
def tool(fn: Callable[..., Any], /) -> Tool: ...
@overload
def tool(
    *, name: str | None = None, description: str | None = None
) -> Callable[[Callable[..., Any]], Tool]: ...
def tool(
    fn: Callable[..., Any] | None = None,
    /,
    *,
    name: str | None = None,
    description: str | None = None,
) -> Tool | Callable[[Callable[..., Any]], Tool]:
    """Turn a typed function (sync or async) into a tool."""

    def wrap(f: Callable[..., Any]) -> Tool:
        return _build(f, name=name, description=description, effect=False, retry="at_most_once")

    return wrap(fn) if fn is not None else wrap


@overload
def effect(fn: Callable[..., Any], /) -> Tool: ...
@overload
def effect(
    *, name: str | None = None, description: str | None = None, retry: Retry = "at_most_once"
) -> Callable[[Callable[..., Any]], Tool]: ...
def effect(
    fn: Callable[..., Any] | None = None,
    /,
    *,
    name: str | None = None,
    description: str | None = None,
    retry: Retry = "at_most_once",
) -> Tool | Callable[[Callable[..., Any]], Tool]:
    """A tool with side effects, journaled so that a completed call never runs twice.

    A call that started but never recorded its result (the process died) is not
    run again unless ``retry="at_least_once"``; the model is told its outcome is
    unknown instead.
    """

    def wrap(f: Callable[..., Any]) -> Tool:
        return _build(f, name=name, description=description, effect=True, retry=retry)

    return wrap(fn) if fn is not None else wrap
