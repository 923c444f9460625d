"""Tools the engine adds: ``get_state``/``update_state`` for an agent with a
``state`` model, ``final_result`` for one with an ``output`` model, and
``ask_human`` for one that may ask a person (``Agent(ask_human=...)``)."""

from __future__ import annotations

import json
from dataclasses import dataclass
from datetime import timedelta
from typing import Any, Literal

import pydantic

from runner.core.approvals.expiry import check_expiry, expiry_seconds
from runner.core.errors import InvalidInput, RunwrightError
from runner.core.steps.tools import Tool

FINAL_RESULT = "final_result"
ASK_HUMAN = "ask_human"
# The longest question a model may ask, and the longest text answer.
MAX_QUESTION_CHARS = 4_000
MAX_TEXT_ANSWER_CHARS = 20_000


@dataclass
class StateHolder:
    """The run's working state during one execution; committed with the step."""

    value: Any
    changed: bool = False


class _NoArguments(pydantic.BaseModel):
    model_config = pydantic.ConfigDict(extra="forbid")


class _Patch(pydantic.BaseModel):
    model_config = pydantic.ConfigDict(extra="forbid")
    patch: dict[str, Any] = pydantic.Field(
        description="Fields to set; the others keep their values."
    )


def initial_state(model: type[pydantic.BaseModel]) -> Any:
    try:
        return model().model_dump(mode="json")
    except pydantic.ValidationError:
        return {}


def state_tools(model: type[pydantic.BaseModel], holder: StateHolder) -> list[Tool]:
    schema = json.dumps(model.model_json_schema(), separators=(",", ":"))

    def get_state() -> Any:
        return holder.value

    def update_state(patch: dict[str, Any]) -> Any:
        merged = {**(holder.value or {}), **patch}
        holder.value = model.model_validate(merged).model_dump(mode="json")
        holder.changed = True
        return holder.value

    return [
        Tool(get_state, name="get_state", description="Read the run's state.", params=_NoArguments),
        Tool(
            update_state,
            name="update_state",
            description=f"Update the run's state with a partial patch. Its schema: {schema}",
            params=_Patch,
        ),
    ]


def output_tool(model: type[pydantic.BaseModel]) -> Tool:
    def final_result(**fields: Any) -> str:
        return "Final result recorded."

    doc = model.__doc__ or ""
    return Tool(
        final_result,
        name=FINAL_RESULT,
        description=(
            "Give the final result of this task. Call it exactly once, when you are done. "
            + doc.strip()
        ).strip(),
        params=model,
    )


@dataclass(frozen=True)
class AskHuman:
    """``Agent(ask_human=AskHuman(...))``: the model may ask a person a
    question (the built-in ``ask_human`` tool) and the run waits for the
    answer, holding no worker. ``answer``: a pydantic model the answer must
    fit (a form in the console), else free text; ``expires_in`` and
    ``on_expire`` as for an :class:`~runner.core.agent.ApprovalPolicy`: an
    unanswered question tells the model so (``"deny"``) or fails the run
    ``question_expired`` (``"fail"``). ``Agent(ask_human=True)`` is
    ``AskHuman()``, ``Agent(ask_human=Model)`` is ``AskHuman(answer=Model)``."""

    answer: type[pydantic.BaseModel] | None = None
    # None: the project's default, RUNWRIGHT_APPROVAL_EXPIRES_SECONDS (a day).
    expires_in: timedelta | float | None = None
    on_expire: Literal["deny", "fail"] = "deny"
    # "requester": in a thread, the question is for the thread's own user,
    # whose next message answers it (``Engine.send``).
    to: Literal["anyone", "requester"] = "anyone"

    def __post_init__(self) -> None:
        from runner.core.threads import check_addressed

        check_addressed("AskHuman", self.to)
        if self.answer is not None and not (
            isinstance(self.answer, type) and issubclass(self.answer, pydantic.BaseModel)
        ):
            raise InvalidInput("AskHuman.answer must be a pydantic model class")
        check_expiry("AskHuman", self.expires_in, self.on_expire)

    def expires_seconds(self, default: float) -> float:
        return expiry_seconds(self.expires_in, default)

    def answer_schema(self) -> dict[str, Any]:
        """What an answer must fit (JSON Schema): the model's, or text."""
        if self.answer is None:
            return {"type": "string", "minLength": 1, "maxLength": MAX_TEXT_ANSWER_CHARS}
        schema = self.answer.model_json_schema()
        return schema


def ask_human_spec(option: object) -> AskHuman | None:
    """``Agent(ask_human=...)`` as an :class:`AskHuman` (None: it may not ask)."""
    if option is None or option is False:
        return None
    if option is True:
        return AskHuman()
    if isinstance(option, AskHuman):
        return option
    if isinstance(option, type) and issubclass(option, pydantic.BaseModel):
        return AskHuman(answer=option)
    raise InvalidInput(
        f"ask_human must be True, a pydantic model class or an AskHuman, not {option!r}"
    )


class _Question(pydantic.BaseModel):
    model_config = pydantic.ConfigDict(extra="forbid")
    question: str = pydantic.Field(
        min_length=1,
        max_length=MAX_QUESTION_CHARS,
        description="The question, with what the person needs to answer it.",
    )


class AskHumanTool(Tool):
    """The ``ask_human`` tool: never invoked. A call of it becomes a request
    of kind ``input`` (runner/core/steps/toolcalls/gate.py), and its answer, once a
    person gives it, is the call's result."""

    def __init__(self, spec: AskHuman) -> None:
        self.spec = spec
        description = (
            "Ask a person a question and wait for their answer. Use it when you need "
            "information or a decision that only a person can give."
        )
        if spec.answer is not None:
            shape = json.dumps(spec.answer_schema(), separators=(",", ":"))
            description += f" The answer comes back as JSON that fits this schema: {shape}"
        super().__init__(self._never, name=ASK_HUMAN, description=description, params=_Question)

    @staticmethod
    def _never(**arguments: Any) -> Any:
        raise RunwrightError("ask_human is answered by a person, never called")
