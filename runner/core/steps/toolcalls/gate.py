"""The gate a tool call passes before it runs: a person's approval (asked, or
given for the rest of the run: a standing approval), their refusal, the
arguments they edited, and the model's questions to them (``ask_human``)."""

from __future__ import annotations

import json
from datetime import timedelta
from typing import Any

import pydantic

from runner.core import versions
from runner.core.agent import Agent
from runner.core.approvals.expiry import expired, expiry_message
from runner.core.errors import ApprovalNotFound, ToolInputError
from runner.core.journal import Journal
from runner.core.observe import ToolCall, ToolStatus
from runner.core.steps.builtin_tools import ASK_HUMAN, AskHumanTool
from runner.core.steps.history import OpenStep, approval_request, edited_content
from runner.core.steps.services import Services
from runner.core.steps.toolcalls.results import CallResult, StepCalls, error
from runner.core.steps.tools import Tool
from runner.core.threads import addressed
from store.jsonsafe import clean_json
from store.models import (
    Message,
    NewApproval,
    OnDeny,
    RequestKind,
    Run,
    RunError,
    StandingApproval,
)


class Gate:
    """The gate of one execution's tool calls; :meth:`begin` starts a step."""

    def __init__(self, journal: Journal, services: Services, agent: Agent, run: Run) -> None:
        self.journal = journal
        self.services = services
        self.agent = agent
        self.run_ = run
        self.expires_seconds = services.settings.approval_expires_seconds
        self.notify_delay = services.notify_delay if agent.notifier else None
        self.step = 0
        # The run's standing approvals by tool (read once a call of the step needs one).
        self._grants: dict[str, StandingApproval] | None = None
        # The model's arguments of the calls a person edited, by call id.
        self.edited: dict[str, Any] = {}

    def begin(self, k: int) -> None:
        self.step, self._grants, self.edited = k, None, {}

    async def check(
        self,
        step: OpenStep,
        call_id: str,
        tool: Tool,
        args: pydantic.BaseModel,
        input: Any,
        out: StepCalls,
    ) -> tuple[pydantic.BaseModel, Any] | None:
        """The arguments and input a call nobody decided yet runs with; None
        when the gate answered it: a result, or a request for a person, added
        to ``out``. A decided call is :meth:`decided`'s (a question's answer
        is this one's)."""
        name = tool.name
        response = step.responses.get(call_id)
        if isinstance(tool, AskHumanTool):
            # A question: the person's answer is its result.
            if response is not None:
                out.results.append(await self._answered(call_id, name, input, response))
            elif call_id not in step.requests:
                out.approvals.append(self._question(call_id, tool, input))
            return None
        if response is None and call_id not in step.requests:
            policy = self.agent.approval_policy(name, input)
            if policy is not None:
                grant = (await self._standing()).get(name)
                approval = self._request(
                    call_id,
                    tool,
                    input,
                    policy.expires_seconds(self.expires_seconds),
                    policy.on_expire,
                    on_deny=OnDeny(self.agent.denial(policy)),
                    granted=grant,
                    addressed_to=addressed(policy.to),
                )
                if grant is None:
                    entry = approval_request(
                        approval.approval_id, call_id, name, input, tool.about()
                    )
                    out.approvals.append((approval, entry))
                    return None
                out.granted.append(approval)  # approved for the rest of the run
        return args, input

    async def decided(
        self,
        call_id: str,
        name: str,
        tool: Tool | None,
        raw_args: Any,
        response: Message,
        out: StepCalls,
    ) -> tuple[Tool, pydantic.BaseModel, Any] | None:
        """A call a person decided, applied to its tool as it is now, which
        may have changed since the call was requested (docs/approvals.md):
        the tool, arguments and input it runs with; None when the gate
        answered it. A denial is told to the model whatever the tool is now;
        an approval runs the person's edited arguments, else the model's,
        parsed by the tool now, and the model is told when they no longer
        fit it; an approved call whose tool no longer exists ends the run
        (``out.failure``), never read as a call of an unknown tool."""
        given = _given(tool, raw_args)
        if not response.get("approved"):
            out.results.append(await self._refused(call_id, name, given, response))
            self._denied(call_id, name, tool, given)
            return None
        if tool is None:
            approval = response.get("approval_id") or "?"
            out.failure = RunError(
                "tool_changed",
                f"a person approved the call of {name} (approval {approval}), and the "
                f"agent has no tool {name} now: the tool was renamed or removed since "
                "the call was requested, so the call was not run",
            )
            return None
        edited = response.get("arguments")
        try:
            # A person's edit was checked against the tool when they decided; again here.
            args = tool.parse(raw_args if edited is None else edited)
        except ToolInputError as exc:
            if edited is None:
                message = (
                    f"the call a person approved no longer fits {name} as it is now "
                    f"(the tool changed since the call was requested): {exc}"
                )
            else:
                message = f"the arguments a person approved do not fit {name}: {exc}"
            out.results.append(error(call_id, name, given, message))
            return None
        input = clean_json(args.model_dump(mode="json"))
        if edited is not None:
            self.edited[call_id] = given
        return tool, args, input

    def edit(self, results: list[CallResult]) -> None:
        """Tell the model, in each edited call's result, what a person changed."""
        for result in results:
            if result.call_id in self.edited:
                result.content = edited_content(result.content, self.edited[result.call_id])

    def _request(
        self,
        call_id: str,
        tool: Tool,
        input: Any,
        expires_seconds: float,
        on_expire: str,
        *,
        kind: RequestKind = RequestKind.APPROVAL,
        schema: Any = None,
        on_deny: OnDeny = OnDeny.CONTINUE,
        granted: StandingApproval | None = None,
        addressed_to: str | None = None,
    ) -> NewApproval:
        """A request for a person about ``call_id``: an approval (``schema``,
        what edited arguments must fit: the tool's own), or a question."""
        now = self.services.clock.now()
        notify = self.notify_delay is not None and granted is None
        return NewApproval(
            tool_call_id=call_id,
            tool_name=tool.name,
            input=input,
            expires_at=now + timedelta(seconds=expires_seconds),
            on_expire=on_expire,
            token_id=self.services.tokens.current_id,
            next_notify_at=now + self.notify_delay if notify and self.notify_delay else None,
            kind=kind,
            schema=schema if schema is not None else tool.schema()["function"]["parameters"],
            on_deny=on_deny,
            granted=granted,
            version=self.run_.version,
            tool_kind=versions.tool_spec(tool)["kind"],
            # A request of a run of no thread has no requester: anyone decides.
            addressed_to=addressed_to if self.run_.thread else None,
        )

    def _question(
        self, call_id: str, tool: AskHumanTool, input: Any
    ) -> tuple[NewApproval, Message]:
        """The model's question to a person: a request of kind ``input``."""
        spec = tool.spec
        question = self._request(
            call_id,
            tool,
            input,
            spec.expires_seconds(self.expires_seconds),
            spec.on_expire,
            kind=RequestKind.INPUT,
            schema=spec.answer_schema(),
            addressed_to=addressed(spec.to),
        )
        return question, approval_request(question.approval_id, call_id, tool.name, input)

    async def _answered(self, call_id: str, name: str, input: Any, response: Message) -> CallResult:
        """A question's result: the person's answer (text as it is, anything
        else as JSON), or why there is none (it expired)."""
        if not response.get("approved"):
            return await self._refused(call_id, name, input, response)
        answer = response.get("answer")
        content = answer if isinstance(answer, str) else json.dumps(answer, ensure_ascii=False)
        return CallResult(call_id, name, input, content, output={"answer": answer})

    async def _standing(self) -> dict[str, StandingApproval]:
        """The run's standing approvals by tool, read once per step."""
        if self._grants is None:
            found = await self.journal.standing_approvals()
            self._grants = {grant.tool_name: grant for grant in found}
        return self._grants

    async def _refused(self, call_id: str, name: str, input: Any, response: Message) -> CallResult:
        """A call not approved: denied by a person with their reason, or left
        to expire, told apart by the approval's record (runner/core/approvals/expiry.py)."""
        approval_id = response.get("approval_id")
        if isinstance(approval_id, str):
            try:
                approval = await self.journal.approval(approval_id)
            except ApprovalNotFound:
                pass  # purged with its run (a fork keeps the response): read as given
            else:
                if expired(approval):
                    return error(call_id, name, input, expiry_message(approval))
        reason = response.get("reason") or "no reason given"
        if name == ASK_HUMAN:
            return error(call_id, name, input, "not answered", reason=reason)
        # A person's refusal, marked as one, with their reason: the model adjusts.
        return error(call_id, name, input, "denied by a human reviewer", reason=reason)

    def _denied(self, call_id: str, name: str, tool: Tool | None, input: Any) -> None:
        """Told as a call of its own: a person refused it, so it never ran."""
        refused = ToolCall(
            name,
            call_id,
            self.step,
            effect=tool is not None and tool.effect,
            arguments=input,
            mcp_server=None if tool is None else tool.mcp_server,
            status=ToolStatus.DENIED,
        )
        with self.services.observer.tool_call(self.run_, refused):
            pass


def _given(tool: Tool | None, raw_args: Any) -> Any:
    """The model's arguments of a call, as its records show them: parsed by
    its tool, or as JSON when the tool is gone or takes them no longer."""
    if tool is not None:
        try:
            return clean_json(tool.parse(raw_args).model_dump(mode="json"))
        except ToolInputError:
            pass
    if isinstance(raw_args, str):
        try:
            return clean_json(json.loads(raw_args))
        except ValueError:
            return raw_args
    return clean_json(raw_args)
