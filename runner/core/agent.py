"""Agents, their budgets and approval policies, and the registry that names them."""

from __future__ import annotations

import contextlib
import contextvars
import functools
import hashlib
import importlib
import os
import sys
import threading
import types
import warnings
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import timedelta
from typing import Any, Generic, Literal, Protocol, TypeVar, cast, overload

import pydantic

from runner.core import versions
from runner.core.approvals.expiry import check_expiry, expiry_seconds
from runner.core.children import ChildTool, child_tool
from runner.core.errors import (
    AgentAlreadyRegistered,
    AgentNotFound,
    ConfigurationError,
    InvalidInput,
)
from runner.core.mcp.servers import MCPServer
from runner.core.redaction import Redactor, RedactSpec
from runner.core.retry import RetryPolicy
from runner.core.settings import Settings
from runner.core.steps.builtin_tools import AskHuman, ask_human_spec
from runner.core.steps.context_window import History
from runner.core.steps.run_context import RunContext
from runner.core.steps.tools import Tool
from runner.core.threads import AddressedTo, OnNewMessage, check_addressed, check_policy
from runner.core.versions import POLICIES, AgentVersion, OnNewVersion, check_label
from store.models import TriggerEnvelope

OnExpire = Literal["deny", "fail"]
# What a person's denial does: the model is told (``"continue"``), or the run
# fails ``approval_denied`` (``"fail"``).
OnDenyRule = Literal["continue", "fail"]
_ON_DENY = ("continue", "fail")

# The overrides in force in this context (Agent.override): by agent (its
# id), the fields replaced. A context of its own for each thread and task, so
# that overrides on two threads never see, or end, each other's.
_overrides: contextvars.ContextVar[Mapping[int, Mapping[str, Any]]] = contextvars.ContextVar(
    "runwright_agent_overrides", default=types.MappingProxyType({})
)
_NO_DEFAULT = object()
V = TypeVar("V")


class _Overridable(Generic[V]):
    """A field of :class:`Agent` that ``Agent.override`` replaces in the
    current context only (a descriptor-typed dataclass field: read through
    the context's overrides, stored on the agent)."""

    def __init__(self, default: Any = _NO_DEFAULT) -> None:
        self._default = default
        self._name = ""

    def __set_name__(self, owner: type, name: str) -> None:
        self._name = name

    @overload
    def __get__(self, agent: None, owner: type | None = None) -> V: ...
    @overload
    def __get__(self, agent: Agent, owner: type | None = None) -> V: ...
    def __get__(self, agent: Agent | None, owner: type | None = None) -> V:
        if agent is None:  # the dataclass asks for the field's default
            if self._default is _NO_DEFAULT:
                raise AttributeError(self._name)
            return cast(V, self._default)
        replaced = _overrides.get().get(id(agent))
        if replaced is not None and self._name in replaced:
            return cast(V, replaced[self._name])
        return cast(V, agent.__dict__[self._name])

    def __set__(self, agent: Agent, value: V) -> None:
        agent.__dict__[self._name] = value


class HasModel(Protocol):
    """What names a model (a :class:`runner.testing.ScriptedModel`)."""

    @property
    def model(self) -> str: ...


# A slot key of a run's limits (Concurrency, max_running) past this length is
# hashed: the limiter's keys are at most 200 characters.
_SLOT_KEY_CHARS = 160


@dataclass(frozen=True)
class Concurrency:
    """How many runs of a key execute at once (docs/flow-control.md): ``key``,
    a function of the trigger (None: the run has no key), and ``limit``. With
    ``limit=1`` it is ``concurrency_key``: one run of the key at a time, from
    its start to its end, oldest first. Above 1, up to ``limit`` runs of the
    key execute at once; a run over it waits without a worker, and goes when
    one of theirs ends its execution, in turn by tenant."""

    key: Callable[[TriggerEnvelope], str | None]
    limit: int = 1

    def __post_init__(self) -> None:
        if not callable(self.key):
            raise InvalidInput(
                f"Concurrency.key must be a function of the trigger, not {self.key!r:.60}"
            )
        if not isinstance(self.limit, int) or isinstance(self.limit, bool) or self.limit < 1:
            raise InvalidInput(
                f"Concurrency.limit must be a whole number of 1 or more, not {self.limit!r:.40}"
            )


def slot_key(kind: str, *parts: str) -> str:
    """The limiter's key of a run limit: readable, or hashed past its length."""
    key = ":".join((kind, *parts))
    if len(key) <= _SLOT_KEY_CHARS:
        return key
    return f"{kind}:{hashlib.sha256(key.encode()).hexdigest()}"


def limit_label(key: str) -> str:
    """A limit key as metrics name it: a model or an agent as it is, a key's
    ``Concurrency`` by its agent alone, since the key is the trigger's value
    (a customer's id, say) and no label carries a payload's."""
    kind, _, rest = key.partition(":")
    if kind != "concurrency":
        return key
    agent, colon, _ = rest.partition(":")
    return f"concurrency:{agent}" if colon else "concurrency"


@dataclass(frozen=True)
class Budget:
    """Limits of a run. ``max_steps`` and ``max_tokens`` count over all of its
    executions; ``timeout_ms`` applies afresh to each execution."""

    max_steps: int = 20
    max_tokens: int | None = None
    timeout_ms: int | None = None
    # What the run's model calls may cost, in USD (litellm's cost map).
    max_cost_usd: float | None = None

    def __post_init__(self) -> None:
        if self.max_steps < 1:
            raise InvalidInput("Budget.max_steps must be at least 1")
        if self.max_tokens is not None and self.max_tokens < 1:
            raise InvalidInput("Budget.max_tokens must be positive")
        if self.timeout_ms is not None and self.timeout_ms < 1:
            raise InvalidInput("Budget.timeout_ms must be positive")
        if self.max_cost_usd is not None and not 0 < self.max_cost_usd < float("inf"):
            raise InvalidInput("Budget.max_cost_usd must be a positive number")


@dataclass(frozen=True)
class ApprovalPolicy:
    """When and how a tool call waits for a person.

    ``when`` narrows the policy to some inputs; ``on_expire`` says what happens
    if nobody decides in time: ``"deny"`` tells the model it was denied
    (reason ``expired``), ``"fail"`` fails the run with ``approval_expired``.
    ``on_deny`` says what a person's denial does (None: the agent's
    ``on_deny``): ``"continue"`` gives the model the reason as the call's
    result, ``"fail"`` fails the run with ``approval_denied``.
    """

    # None: the project's default, RUNWRIGHT_APPROVAL_EXPIRES_SECONDS (a day).
    expires_in: timedelta | float | None = None
    on_expire: OnExpire = "deny"
    when: Callable[[dict[str, Any]], bool] | None = None
    on_deny: OnDenyRule | None = None
    # "requester": in a thread, the thread's own user decides it in the chat
    # (``Engine.decide_in_thread``); a person who may decide in the console still can.
    to: AddressedTo = "anyone"

    def __post_init__(self) -> None:
        check_expiry("ApprovalPolicy", self.expires_in, self.on_expire)
        check_addressed("ApprovalPolicy", self.to)
        if self.on_deny is not None and self.on_deny not in _ON_DENY:
            raise InvalidInput(f"on_deny must be 'continue' or 'fail', not {self.on_deny!r}")

    def expires_seconds(self, default: float) -> float:
        """Seconds until a request expires; ``default`` if the policy sets none."""
        return expiry_seconds(self.expires_in, default)


ApprovalRule = bool | Callable[[dict[str, Any]], bool] | ApprovalPolicy
ToolsFactory = Callable[[RunContext], Iterable[Tool]]


@dataclass(frozen=True)
class ApprovalRequest:
    """What a notifier receives: enough to build a link a person can follow.

    ``kind`` is ``"approval"`` (approve or deny ``tool_name`` with ``input``;
    ``schema`` is what edited arguments must fit) or ``"input"`` (answer the
    model's ``question``; ``schema`` is what the answer must fit). The link
    decides either with ``token``."""

    run_id: str
    agent: str
    approval_id: str
    tool_name: str
    input: Any
    expires_at: Any
    token: str
    token_id: str
    # The top-level run of the run's tree: the run itself, unless it is a
    # child run (runner/core/children.py), whose approvals a person judges for it.
    root_run_id: str | None = None
    kind: str = "approval"
    question: str | None = None
    schema: Any = None


@dataclass
class Agent:
    """A named tool-calling LLM loop. Creating one registers it under its name."""

    name: str
    model: _Overridable[str] = _Overridable()
    instructions: _Overridable[str] = _Overridable("")
    tools: _Overridable[ToolsFactory | Iterable[Tool]] = _Overridable(())
    # MCP servers whose tools the agent also gets (runner/core/mcp/, the ``mcp`` extra).
    mcp: Sequence[MCPServer] = ()
    model_settings: Mapping[str, Any] = field(default_factory=dict)
    approvals: Mapping[str, ApprovalRule] = field(default_factory=dict)
    budget: Budget = field(default_factory=Budget)
    # How its model requests stay within a token budget as the history grows
    # (runner/core/steps/context_window.py, docs/conversations.md); None: the
    # whole history is sent.
    history: History | None = None
    state: type[pydantic.BaseModel] | None = None
    output: type[pydantic.BaseModel] | None = None
    # The arguments a parent agent's model gives it when it is a tool
    # (``as_tool``), which become its trigger payload; default: one ``task``.
    input: type[pydantic.BaseModel] | None = None
    concurrency_key: Callable[[TriggerEnvelope], str | None] | None = None
    # Whose run it is, from its trigger (``lambda t: t.keys["org"]``): runs
    # waiting for a contended limit are admitted tenant by tenant, in turn
    # (docs/flow-control.md). None: all its runs are one tenant's.
    tenant: Callable[[TriggerEnvelope], str | None] | None = None
    # How many of its runs execute at once: per key (Concurrency), and in all.
    concurrency: Concurrency | None = None
    max_running: int | None = None
    notifier: Callable[[ApprovalRequest], Any] | None = None
    # What is taken out of its runs' data on the way to logs, spans, the
    # public event stream and notifiers, on top of RUNWRIGHT_REDACT: built-in
    # pattern names, compiled regexes, a function of a string, or a Redactor
    # (runner/core/redaction.py). The model and the journal see real values.
    redact: RedactSpec | Sequence[RedactSpec] | None = None
    on_error: Callable[[str, BaseException], Any] | None = None
    # Deprecated: RetryPolicy(in_call_retries=..., in_call_backoff=...). Retries
    # of a transient provider error within one model call; None: the engine's.
    model_retries: int | None = None
    model_backoff_seconds: float | None = None
    # Durable retries once those are spent; None: the project's default
    # (RUNWRIGHT_RETRY_*). Its ``transient`` also decides the in-call retries.
    retry: RetryPolicy | None = None
    # Call the model with litellm's streaming API; deltas are published live, never stored.
    stream: bool = False
    # The model may ask a person a question (the ``ask_human`` tool): True
    # (a text answer), a pydantic model (the answer's shape) or an AskHuman.
    ask_human: bool | type[pydantic.BaseModel] | AskHuman = False
    # What a person's denial does, unless a tool's ApprovalPolicy says: the
    # model is told the reason ("continue"), or the run fails ("fail").
    on_deny: OnDenyRule = "continue"
    # How deep below its top-level run a child this agent's runs start may
    # be (``as_tool`` calls); None: the project's RUNWRIGHT_MAX_CHILD_DEPTH.
    max_child_depth: int | None = None
    # A label for this version of the agent (``"2026-12-05"``), shown beside
    # its fingerprint (runner/core/versions.py, docs/deploying.md).
    version: str | None = None
    # What a run does when it resumes on another version than it last ran on:
    # go on with this one ("continue"), wait for a worker of its own ("pin"),
    # or end failed ``version_changed`` ("fail").
    on_new_version: OnNewVersion = "continue"
    # What a message sent to a thread does while a run of the thread is in
    # progress: "enqueue", "reject", "interrupt" or "rollback"
    # (runner/core/threads.py, docs/conversations.md).
    on_new_message: OnNewMessage = "enqueue"
    register: bool = True
    # Registered where another agent of this name is: replace it on purpose
    # (else AgentAlreadyRegistered).
    replace: bool = False
    _asks: AskHuman | None = field(default=None, init=False, repr=False, compare=False)
    _redactor: Redactor = field(default_factory=Redactor, init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        if not self.name or not isinstance(self.name, str):
            raise InvalidInput("an agent needs a name")
        if not self.model:
            raise InvalidInput(f"agent {self.name!r} needs a litellm model string")
        if self.model_retries is not None and self.model_retries < 0:
            raise InvalidInput(f"agent {self.name!r}: model_retries must be 0 or more")
        if self.model_backoff_seconds is not None and self.model_backoff_seconds < 0:
            raise InvalidInput(f"agent {self.name!r}: model_backoff_seconds must be 0 or more")
        if self.model_retries is not None or self.model_backoff_seconds is not None:
            warnings.warn(
                f"agent {self.name!r}: model_retries and model_backoff_seconds are deprecated; "
                "give retry=RetryPolicy(in_call_retries=..., in_call_backoff=...) instead "
                "(they go in the next release)",
                DeprecationWarning,
                stacklevel=3,
            )
        if self.retry is not None and not isinstance(self.retry, RetryPolicy):
            raise InvalidInput(f"agent {self.name!r}: retry must be a RetryPolicy")
        if self.concurrency is not None and not isinstance(self.concurrency, Concurrency):
            raise InvalidInput(f"agent {self.name!r}: concurrency must be a Concurrency")
        if self.concurrency is not None and self.concurrency_key is not None:
            raise InvalidInput(
                f"agent {self.name!r}: give concurrency or concurrency_key, not both "
                "(concurrency_key=f is Concurrency(key=f, limit=1))"
            )
        if self.max_running is not None and (
            not isinstance(self.max_running, int)
            or isinstance(self.max_running, bool)
            or self.max_running < 1
        ):
            raise InvalidInput(
                f"agent {self.name!r}: max_running must be a whole number of 1 or more, "
                f"not {self.max_running!r:.40}"
            )
        if self.tenant is not None and not callable(self.tenant):
            raise InvalidInput(
                f"agent {self.name!r}: tenant must be a function of the trigger, "
                f"not {self.tenant!r:.60}"
            )
        for tool_name, rule in self.approvals.items():
            if not isinstance(rule, bool | ApprovalPolicy) and not callable(rule):
                raise InvalidInput(
                    f"approval rule for {tool_name!r} must be True, a predicate or an "
                    "ApprovalPolicy"
                )
        if self.input is not None and not (
            isinstance(self.input, type) and issubclass(self.input, pydantic.BaseModel)
        ):
            raise InvalidInput(f"agent {self.name!r}: input must be a pydantic model class")
        if self.max_child_depth is not None and (
            isinstance(self.max_child_depth, bool)
            or not isinstance(self.max_child_depth, int)
            or self.max_child_depth < 0
        ):
            raise InvalidInput(
                f"agent {self.name!r}: max_child_depth must be a whole number, 0 or more"
            )
        if self.on_new_version not in POLICIES:
            raise InvalidInput(
                f"agent {self.name!r}: on_new_version must be 'continue', 'pin' or 'fail', "
                f"not {self.on_new_version!r:.40}"
            )
        check_label(self.name, self.version)
        check_policy(self.name, self.on_new_message)
        self._check_history()
        if self.on_deny not in _ON_DENY:
            raise InvalidInput(
                f"agent {self.name!r}: on_deny must be 'continue' or 'fail', not {self.on_deny!r}"
            )
        try:
            self._redactor = project_redactor() + Redactor.of(self.redact)
        except InvalidInput as exc:
            raise InvalidInput(f"agent {self.name!r}: {exc.message}") from None
        try:
            self._asks = ask_human_spec(self.ask_human)
        except InvalidInput as exc:
            raise InvalidInput(f"agent {self.name!r}: {exc.message}") from None
        self.mcp = tuple(self.mcp)
        names = set()
        for server in self.mcp:
            if not isinstance(server, MCPServer):
                raise InvalidInput(
                    f"agent {self.name!r}: mcp takes runner.mcp.MCPServer declarations, "
                    f"not {server!r}"
                )
            if server.name in names:
                raise InvalidInput(f"agent {self.name!r} has two MCP servers named {server.name!r}")
            names.add(server.name)
        if self.register:
            # Where it is defined (the caller of the dataclass's __init__),
            # for the error that names a second agent of its name.
            caller = sys._getframe(2)
            self.__dict__["_defined_in"] = (
                f"{caller.f_globals.get('__name__', '?')}:{caller.f_lineno}"
            )
            registry.add(self, replace=self.replace)

    def _check_history(self) -> None:
        history = self.history
        if history is None:
            return
        if not isinstance(history, History):
            raise InvalidInput(
                f"agent {self.name!r}: history must be a History, not {history!r:.60}"
            )
        if history.budget_tokens is None:
            # Only then is litellm imported at the definition: its model data
            # says the model's context window.
            from runner.core.model import context_window

            try:
                budget = history.budget(context_window(self.model), self.model)
            except InvalidInput as exc:
                raise InvalidInput(f"agent {self.name!r}: {exc.message}") from None
            if history.summarizes and history.summary_tokens >= budget // 2:
                raise InvalidInput(
                    f"agent {self.name!r}: History.summary_tokens ({history.summary_tokens}) "
                    f"must be under half of the history's budget ({budget} tokens)"
                )

    @contextlib.contextmanager
    def override(
        self,
        *,
        model: str | HasModel | None = None,
        tools: ToolsFactory | Iterable[Tool] | None = None,
        instructions: str | None = None,
    ) -> Iterator[Agent]:
        """Run this agent on another ``model`` (a litellm model string, or a
        :class:`runner.testing.ScriptedModel`), with other ``tools`` (a list,
        or a function of the run's context) or other ``instructions``, inside
        the ``with`` block; what is not given stays the agent's own, and so do
        its approval rules, MCP servers and the rest. For tests: the agent
        keeps its name and registration, so runs started by name use the
        override, and its own are back when the block ends (even if it
        raised). Overrides nest. An override holds in the context that made
        it (a thread, an asyncio task), for the executions started from there
        (``Engine.execute``, the testing kit): tests on two threads override
        an agent each their own way."""
        changes: dict[str, Any] = {}
        if model is not None:
            name = model if isinstance(model, str) else getattr(model, "model", None)
            if not isinstance(name, str) or not name:
                raise InvalidInput(
                    f"agent {self.name!r}: override(model=...) takes a litellm model string or "
                    f"a ScriptedModel, not {model!r}"
                )
            changes["model"] = name
        if tools is not None:
            if isinstance(tools, Tool):  # callable, but not a function of the run's context
                tools = [tools]
            if not callable(tools):
                tools = tuple(tools)
                wrong = [item for item in tools if not isinstance(item, Tool)]
                if wrong:
                    raise InvalidInput(
                        f"agent {self.name!r}: override(tools=...) takes tools, and "
                        f"{wrong[0]!r} is not one; decorate it with @tool"
                    )
            changes["tools"] = tools
        if instructions is not None:
            if not isinstance(instructions, str):
                raise InvalidInput(f"agent {self.name!r}: override(instructions=...) takes text")
            changes["instructions"] = instructions
        if not changes:
            raise InvalidInput(
                f"agent {self.name!r}: override() takes a model, tools or instructions"
            )
        current = _overrides.get()
        token = _overrides.set({**current, id(self): {**current.get(id(self), {}), **changes}})
        try:
            yield self
        finally:
            _overrides.reset(token)

    def as_tool(
        self, name: str | None = None, description: str | None = None, detached: bool = False
    ) -> ChildTool:
        """This agent as a tool of another agent: each call starts a child run
        of it, and its result (its structured output, else its final text) is
        the call's result (runner/core/children.py). ``name`` defaults to the
        agent's; ``detached``: the child runs on when its parent is cancelled."""
        return child_tool(self.name, self.instructions, self.input, name, description, detached)

    def current_version(self) -> AgentVersion:
        """This agent's version as defined now (runner/core/versions.py): its
        fingerprint, label and definition. Computed once; again inside an
        ``override``, which makes another version."""
        if _overrides.get().get(id(self)):
            return versions.of(self)
        found = self.__dict__.get("_version")
        if found is None:
            found = versions.of(self)
            self.__dict__["_version"] = found
        return found

    @property
    def redactor(self) -> Redactor:
        """What is taken out of this agent's runs' data where it leaves for
        people and other systems: the project's RUNWRIGHT_REDACT and its own
        ``redact``."""
        return self._redactor

    @property
    def asks_human(self) -> AskHuman | None:
        """How the agent's model may ask a person (None: it may not)."""
        return self._asks

    def build_tools(self, ctx: RunContext) -> list[Tool]:
        made = self.tools(ctx) if callable(self.tools) else self.tools
        tools = list(made)
        for item in tools:
            if not isinstance(item, Tool):
                raise InvalidInput(
                    f"agent {self.name!r}: {item!r} is not a tool; decorate it with @tool"
                )
        return tools

    def approval_policy(self, tool_name: str, arguments: dict[str, Any]) -> ApprovalPolicy | None:
        """The policy that applies to this call, or None if it needs no approval."""
        rule = self.approvals.get(tool_name)
        if rule is None or rule is False:
            return None
        if rule is True:
            return ApprovalPolicy()
        if isinstance(rule, ApprovalPolicy):
            if rule.when is not None and not rule.when(arguments):
                return None
            return rule
        return ApprovalPolicy() if rule(arguments) else None

    def denial(self, policy: ApprovalPolicy) -> OnDenyRule:
        """What a person's denial of a call under ``policy`` does."""
        return policy.on_deny or self.on_deny

    def tenant_for(self, envelope: TriggerEnvelope) -> str | None:
        """The run's tenant: what ``tenant`` says of its trigger. A function
        that raises or returns anything but a string (or None) is one clear
        error, and no run is made."""
        if self.tenant is None:
            return None
        try:
            found = self.tenant(envelope)
        except Exception as exc:
            raise InvalidInput(
                f"agent {self.name!r}: its tenant function raised {type(exc).__name__}: {exc}"
            ) from exc
        if found is not None and not isinstance(found, str):
            raise InvalidInput(
                f"agent {self.name!r}: its tenant function must return a string or None, "
                f"not {type(found).__name__}"
            )
        return found

    def key_for(self, envelope: TriggerEnvelope) -> str | None:
        if envelope.thread:
            return f"thread:{envelope.thread}"
        if self.concurrency_key is not None:
            return self.concurrency_key(envelope)
        if self.concurrency is not None and self.concurrency.limit == 1:
            return self.concurrency.key(envelope)
        return None

    def run_limits(self, envelope: TriggerEnvelope) -> list[tuple[str, int]]:
        """The limits an execution of a run takes before its first step, as
        (limiter key, how many at once): its key's (``Concurrency`` above 1)
        and its agent's (``max_running``). A key function that raises or
        returns anything but a string is the run's failure, said by the caller."""
        found = []
        if self.concurrency is not None and self.concurrency.limit > 1:
            key = self.concurrency.key(envelope)
            if key is not None:
                if not isinstance(key, str) or not key:
                    raise InvalidInput(
                        f"agent {self.name!r}: its concurrency key function must return a "
                        f"non-empty string or None, not {key!r:.40}"
                    )
                found.append((slot_key("concurrency", self.name, key), self.concurrency.limit))
        if self.max_running is not None:
            found.append((slot_key("agent", self.name), self.max_running))
        return found


class Registry:
    """Agents by name. Workers fill it by importing the modules in ``RUNWRIGHT_AGENTS``."""

    def __init__(self) -> None:
        self._agents: dict[str, Agent] = {}
        self._lock = threading.Lock()

    def add(self, agent: Agent, *, replace: bool = False) -> None:
        """Register ``agent`` by its name; one of that name already there
        raises :class:`AgentAlreadyRegistered` unless ``replace``."""
        with self._lock:
            found = self._agents.get(agent.name)
            if found is not None and found is not agent and not replace:
                raise AgentAlreadyRegistered(
                    f"an agent named {agent.name!r} is registered already (defined at "
                    f"{_where(found)}); give this one another name, or replace=True to "
                    "replace it on purpose"
                )
            self._agents[agent.name] = agent

    def get(self, name: str) -> Agent:
        try:
            return self._agents[name]
        except KeyError:
            known = ", ".join(sorted(self._agents)) or "none"
            raise AgentNotFound(
                f"no agent named {name!r} is registered (known: {known}); "
                "is its module listed in RUNWRIGHT_AGENTS?"
            ) from None

    def names(self) -> list[str]:
        return sorted(self._agents)

    def redactor(self, name: str | None) -> Redactor:
        """The redactor of the agent named ``name``; the project's
        (RUNWRIGHT_REDACT) if this process has no agent of that name."""
        found = self._agents.get(name) if name is not None else None
        return found.redactor if found is not None else project_redactor()

    def versions(self) -> dict[str, str]:
        """The version of each agent, by name (runner/core/versions.py)."""
        with self._lock:
            agents = list(self._agents.values())
        return {agent.name: agent.current_version().id for agent in agents}

    def load(self, modules: Iterable[str]) -> None:
        """Import the agent modules. The current directory is searched too (last,
        so it never shadows an installed package), as people expect of a
        command started in their app's folder."""
        cwd = os.getcwd()
        if "" not in sys.path and cwd not in sys.path:
            sys.path.append(cwd)
        for module in modules:
            try:
                importlib.import_module(module)
            except ImportError as exc:
                raise ConfigurationError(
                    f"cannot import agent module {module!r} (RUNWRIGHT_AGENTS): {exc}"
                ) from exc


@functools.cache
def project_redactor() -> Redactor:
    """The project's redactor, from RUNWRIGHT_REDACT (read once a process)."""
    return Redactor(*Settings.from_env().redact)


def _where(agent: Agent) -> str:
    """Where ``agent`` was defined (module and line), for the error's reader."""
    made = agent.__dict__.get("_defined_in")
    return str(made) if made else "another module"


registry = Registry()
