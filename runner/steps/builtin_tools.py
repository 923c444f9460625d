"""Tools the engine adds: ``get_state``/``update_state`` for an agent with a
``state`` model, and ``final_result`` for one with an ``output`` model."""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

import pydantic

from runner.steps.toolcalls import FINAL_RESULT
from runner.steps.tools import Tool


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
