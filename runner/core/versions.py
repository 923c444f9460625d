"""Agent versions (docs/deploying.md): what changes an agent's behaviour, its
fingerprint, and what changed between two versions.

An agent's *definition* is the JSON of what its model is given and what its
tools do: the model and its settings, the instructions, each tool's name,
kind (a plain tool, an effect, a child run) and parameters, the approval
rules, the output, state and input models, the MCP servers as declared, and
the label the team gave it (``Agent(version=...)``). Its *version* is the
first 12 hex digits of the SHA-256 of that JSON: the same code gives the same
version on every worker, and any change of behaviour gives another one.
Budgets, notifiers and limits are not behaviour and are left out: changing
one is not a new version.

Tools made by a function of the run's context (``tools=lambda ctx: ...``)
are known only when a run builds them: the definition holds the function's
name and a digest of its code instead. An MCP server's tools are listed at
run time (and journaled with the run); the definition holds the server's
declaration.

What a run does when it resumes on another version than the one it ran on is
the agent's ``on_new_version`` (:data:`POLICIES`).
"""

from __future__ import annotations

import hashlib
import json
import re
import types
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Literal

import pydantic

from runner.core.errors import InvalidInput
from store.rules import WAITING_PREFIX

if TYPE_CHECKING:
    from runner.core.steps.tools import Tool

OnNewVersion = Literal["continue", "pin", "fail"]
POLICIES: tuple[OnNewVersion, ...] = ("continue", "pin", "fail")
VERSION_CHARS = 12
# A label a person gives a version: readable, short, no spaces.
LABEL = re.compile(r"[A-Za-z0-9][A-Za-z0-9._+-]{0,63}")
# The limiter key (runs.parked_key) of a pinned run waiting for a worker of its version.
WAITING_KIND = WAITING_PREFIX.rstrip(":")


@dataclass(frozen=True)
class AgentVersion:
    """One version of an agent: its id (the fingerprint), its label, and the
    definition it was computed from."""

    agent: str
    id: str
    label: str | None
    definition: dict[str, Any]
    policy: OnNewVersion = "continue"

    @property
    def title(self) -> str:
        """How people read it: ``2026-12-05 (3f9a1c2b7d10)``, or the id alone."""
        return f"{self.label} ({self.id})" if self.label else self.id


def version_row(version: AgentVersion) -> dict[str, Any]:
    """A version as the store records it (``agent_versions``)."""
    return {
        "agent": version.agent,
        "version": version.id,
        "label": version.label,
        "policy": version.policy,
        "definition": version.definition,
    }


def check_label(agent: str, label: object) -> str | None:
    if label is None:
        return None
    if not isinstance(label, str) or not LABEL.fullmatch(label):
        raise InvalidInput(
            f"agent {agent!r}: version must be a short label (letters, digits, '.', '_', "
            f"'+', '-'; at most 64 characters), not {label!r:.80}"
        )
    return label


def of(agent: Any) -> AgentVersion:
    """The version of ``agent`` (a :class:`runner.core.agent.Agent`) as it
    is defined now (overrides included: a test that overrides a model runs
    another version)."""
    definition = define(agent)
    text = json.dumps(definition, sort_keys=True, separators=(",", ":"), default=str)
    digest = hashlib.sha256(text.encode()).hexdigest()[:VERSION_CHARS]
    return AgentVersion(
        agent.name, digest, definition.get("label"), definition, agent.on_new_version
    )


def define(agent: Any) -> dict[str, Any]:
    """The agent's definition: the JSON its version is the fingerprint of."""
    tools: dict[str, Any]
    made = agent.tools
    if callable(made) and not _is_tool(made):
        tools = {"factory": _code_name(made)}
    else:
        tools = {"tools": {tool.name: tool_spec(tool) for tool in made}}
    asks = agent.asks_human
    return {
        "label": agent.version,
        "model": agent.model,
        "model_settings": _plain(agent.model_settings),
        "instructions": {
            "sha256": hashlib.sha256(agent.instructions.encode()).hexdigest(),
            "chars": len(agent.instructions),
        },
        **tools,
        "approvals": {name: _rule(rule) for name, rule in sorted(agent.approvals.items())},
        "output": _model_schema(agent.output),
        "state": _model_schema(agent.state),
        "input": _model_schema(agent.input),
        "ask_human": None if asks is None else _plain(asks.answer_schema()),
        "on_deny": agent.on_deny,
        "mcp": [_server(server) for server in agent.mcp],
        # Only when set: the versions of agents without one stay as they were.
        **({} if agent.history is None else {"history": _history(agent.history)}),
    }


def tool_spec(tool: Tool) -> dict[str, Any]:
    """What the model is offered of ``tool`` and what calling it does."""
    from runner.core.children import ChildTool

    kind = "child" if isinstance(tool, ChildTool) else "effect" if tool.effect else "tool"
    function = tool.schema()["function"]
    return {
        "kind": kind,
        "description": function.get("description") or "",
        "parameters": function.get("parameters") or {},
    }


def diff(old: Mapping[str, Any], new: Mapping[str, Any]) -> list[str]:
    """What changed from definition ``old`` to ``new``, one line each, as a
    person reads them (``tool refund: parameter reason added (required)``)."""
    changes: list[str] = []
    if old.get("label") != new.get("label"):
        changes.append(f"label: {old.get('label') or 'none'} → {new.get('label') or 'none'}")
    if old.get("model") != new.get("model"):
        changes.append(f"model: {old.get('model')} → {new.get('model')}")
    if old.get("model_settings") != new.get("model_settings"):
        changes.append("model settings changed")
    if old.get("instructions") != new.get("instructions"):
        changes.append("instructions changed")
    changes += _tools_diff(old, new)
    old_rules, new_rules = old.get("approvals") or {}, new.get("approvals") or {}
    for name in sorted(set(old_rules) | set(new_rules)):
        if old_rules.get(name) != new_rules.get(name):
            if name not in old_rules:
                changes.append(f"approval rule for {name} added")
            elif name not in new_rules:
                changes.append(f"approval rule for {name} removed")
            else:
                changes.append(f"approval rule for {name} changed")
    for part in ("output", "state", "input"):
        if old.get(part) != new.get(part):
            changes.append(f"{part} model changed")
    if old.get("ask_human") != new.get("ask_human"):
        changes.append("ask_human changed")
    if old.get("on_deny") != new.get("on_deny"):
        changes.append(f"on_deny: {old.get('on_deny')} → {new.get('on_deny')}")
    if old.get("mcp") != new.get("mcp"):
        changes.append("MCP servers changed")
    return changes


def tool_changes(
    name: str, old: Mapping[str, Any] | None, new: Mapping[str, Any] | None
) -> list[str]:
    """What changed of tool ``name``: gone, its kind, its parameters (added,
    removed, retyped, now required or optional)."""
    if old is None and new is None:
        return []
    if new is None:
        return [f"tool {name} no longer exists"]
    if old is None:
        return [f"tool {name} added"]
    changes: list[str] = []
    if old.get("kind") != new.get("kind"):
        changes.append(
            f"tool {name}: {_kind_words(old.get('kind'))} → {_kind_words(new.get('kind'))}"
        )
    changes += [
        f"tool {name}: {line}"
        for line in parameter_changes(old.get("parameters"), new.get("parameters"))
    ]
    if old.get("description") != new.get("description") and not changes:
        changes.append(f"tool {name}: description changed")
    return changes


def parameter_changes(old: Any, new: Any) -> list[str]:
    """How a tool's parameters (JSON Schema objects) changed, one line each."""
    old = old if isinstance(old, dict) else {}
    new = new if isinstance(new, dict) else {}
    old_props = old.get("properties") or {}
    new_props = new.get("properties") or {}
    old_required = set(old.get("required") or ())
    new_required = set(new.get("required") or ())
    lines: list[str] = []
    for name in sorted(set(old_props) | set(new_props)):
        if name not in old_props:
            needed = "required" if name in new_required else "optional"
            lines.append(f"parameter {name} added ({needed})")
        elif name not in new_props:
            lines.append(f"parameter {name} removed")
        else:
            was, now = _type_of(old_props[name]), _type_of(new_props[name])
            if was != now:
                lines.append(f"parameter {name} retyped ({was} → {now})")
            elif old_props[name] != new_props[name]:
                lines.append(f"parameter {name} changed")
            if (name in old_required) != (name in new_required):
                lines.append(
                    f"parameter {name} now {'required' if name in new_required else 'optional'}"
                )
    if not lines and old != new:
        lines.append("parameters changed")
    return lines


def waiting_key(agent: str, version: str) -> str:
    """What a pinned run waiting for a worker of ``version`` is parked on."""
    return f"{WAITING_KIND}:{agent}:{version}"


def waiting_for(parked_key: str | None) -> tuple[str, str] | None:
    """(agent, version) of a run parked for a worker of its version, else None."""
    if not parked_key or not parked_key.startswith(f"{WAITING_KIND}:"):
        return None
    agent, sep, version = parked_key[len(WAITING_KIND) + 1 :].rpartition(":")
    return (agent, version) if sep and agent and version else None


def queue_for(base: str, version: str) -> str:
    """The Celery queue of one version's pinned runs (``runwright.v.3f9a1c2b7d10``):
    workers that load that version take it."""
    return f"{base}.v.{version}"


# ---------------------------------------------------------------- helpers


def _tools_diff(old: Mapping[str, Any], new: Mapping[str, Any]) -> list[str]:
    if "factory" in old or "factory" in new:
        return ["tools changed"] if old.get("factory") != new.get("factory") else []
    before, after = old.get("tools") or {}, new.get("tools") or {}
    gone = [name for name in before if name not in after]
    added = [name for name in after if name not in before]
    lines: list[str] = []
    for name in list(gone):
        # Renamed: the same tool under another name (its kind and parameters).
        same = [other for other in added if _same_tool(before[name], after[other])]
        if len(same) == 1:
            lines.append(f"tool {name} renamed to {same[0]}")
            gone.remove(name)
            added.remove(same[0])
    lines += [f"tool {name} removed" for name in gone]
    lines += [f"tool {name} added" for name in added]
    for name in sorted(set(before) & set(after)):
        lines += tool_changes(name, before[name], after[name])
    return lines


def _same_tool(a: Mapping[str, Any], b: Mapping[str, Any]) -> bool:
    return a.get("kind") == b.get("kind") and a.get("parameters") == b.get("parameters")


def _kind_words(kind: Any) -> str:
    return {"effect": "an effect", "tool": "read-only", "child": "a child run"}.get(
        str(kind), str(kind)
    )


def _type_of(schema: Any) -> str:
    if not isinstance(schema, dict):
        return "any"
    if "type" in schema:
        kind = schema["type"]
        return "|".join(kind) if isinstance(kind, list) else str(kind)
    for key in ("anyOf", "oneOf"):
        if key in schema:
            return "|".join(_type_of(s) for s in schema[key])
    if "$ref" in schema:
        return str(schema["$ref"]).rsplit("/", 1)[-1]
    return "any"


def _is_tool(value: Any) -> bool:
    from runner.core.steps.tools import Tool

    return isinstance(value, Tool)


def _rule(rule: Any) -> Any:
    if isinstance(rule, bool):
        return rule
    if hasattr(rule, "on_expire"):  # an ApprovalPolicy
        return {
            "expires_in": str(rule.expires_in),
            "on_expire": rule.on_expire,
            "on_deny": rule.on_deny,
            "when": None if rule.when is None else _code_name(rule.when),
        }
    return {"when": _code_name(rule)}


def _code_name(fn: Callable[..., Any]) -> dict[str, str]:
    """A function by its name and a digest of its code, so that changing it
    changes the version, and the same code on two workers does not."""
    name = f"{getattr(fn, '__module__', '?')}:{getattr(fn, '__qualname__', type(fn).__name__)}"
    code = getattr(fn, "__code__", None)
    digest = hashlib.sha256()
    if isinstance(code, types.CodeType):
        _digest_code(code, digest)
    return {"name": name, "code": digest.hexdigest()[:16]}


def _digest_code(code: types.CodeType, digest: Any) -> None:
    digest.update(code.co_code)
    digest.update(repr(code.co_names).encode())
    for const in code.co_consts:
        if isinstance(const, types.CodeType):
            _digest_code(const, digest)
        else:
            digest.update(repr(const).encode())


def _model_schema(model: type[pydantic.BaseModel] | None) -> Any:
    return None if model is None else model.model_json_schema()


def _history(history: Any) -> dict[str, Any]:
    keep = history.keep
    return {
        "budget_tokens": history.budget_tokens,
        "share": history.share,
        "keep": _code_name(keep) if callable(keep) else keep,
        "summary_model": history.summary_model,
        # A digest: settings may hold a key, and a definition is stored.
        "summary_settings": hashlib.sha256(
            json.dumps(_plain(history.summary_settings), sort_keys=True).encode()
        ).hexdigest(),
        "summary_tokens": history.summary_tokens,
        "retain": history.retain,
        "summary_instructions": hashlib.sha256(history.summary_instructions.encode()).hexdigest(),
    }


def _server(server: Any) -> dict[str, Any]:
    return {
        "name": server.name,
        "transport": server.transport,
        "command": server.command,
        "args": list(server.args),
        "url": server.url,
        "allow": None if server.allow is None else sorted(server.allow),
        "block": sorted(server.block),
        "effects": {k: bool(v) for k, v in sorted(server.effects.items())},
    }


def _plain(value: Any) -> Any:
    return json.loads(json.dumps(value, sort_keys=True, default=str))
