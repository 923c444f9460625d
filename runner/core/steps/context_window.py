"""Histories that outgrow the model's context window (docs/conversations.md).

An agent with ``history=History(...)`` keeps each model request within a
token budget. The history itself (the checkpoint's messages, the journal)
keeps every message unchanged: only the request is shortened, from the oldest
turns. A turn is a user message and everything up to the next one, so a
shortened request never separates an assistant's tool calls from their results.

``keep="summarize"`` replaces the dropped turns with a summary the model
writes. The summary is a step of the run, journaled like a model step (its
``llm`` row's input holds ``history_summary``), and committed as an engine
record of the history (role ``history_summary``) that says how many messages
of the conversation it stands for. A run taken over after the summary's
journal write reuses it; a later run of the thread finds it in the history it
continues; and the next summary summarizes this one with the turns dropped
since, so each summary's request holds only what is new.
"""

from __future__ import annotations

import bisect
import json
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal

from runner.core.errors import ContextExceeded, InvalidInput
from runner.core.steps.history import ENGINE_ROLES, HISTORY_SUMMARY, as_ran
from store.models import Message

# The history's record of a summary (HISTORY_SUMMARY) holds its text, and how
# many messages of the conversation (the history without engine records and
# summaries) it stands for, from the start.

KeepFunction = Callable[[list[Message], int], list[Message]]
Keep = Literal["trim", "summarize"] | KeepFunction
_KEEPS = ("trim", "summarize")

SUMMARY_INSTRUCTIONS = (
    "You keep the memory of a long conversation between a user and an AI assistant "
    "that uses tools. Write a summary of the conversation you are given (and of the "
    "earlier summary, if there is one) that lets the assistant carry on without it: the "
    "user's requests and preferences, facts learnt, tool results that still matter, "
    "decisions made and what is still open. Be concise; write only the summary."
)
SUMMARY_PREFACE = "A summary of the conversation before the messages that follow:"


@dataclass(frozen=True)
class History:
    """How an agent's model requests stay within a token budget as its
    history (a long run, or a thread of runs) grows.

    - ``budget_tokens``: the most tokens a request may take (its messages,
      instructions and tool schemas, by litellm's counter for the model).
      None: ``share`` of the model's context window from litellm's model
      data; a model litellm does not know needs ``budget_tokens``.
    - ``keep``: what the request keeps when the history is over the budget.
      ``"trim"`` drops the oldest turns whole; ``"summarize"`` replaces them
      with a summary the model writes (a step of the run, journaled, so a
      crash never pays for it twice); or a function ``keep(messages, budget)``
      of the request's messages that returns the ones to send.
    - ``summary_model``: the model that writes summaries (default: the run's),
      called with ``summary_settings`` (default: the agent's ``model_settings``
      when it is the run's model, none otherwise).
    - ``summary_tokens``: the most tokens a summary may take (its call's ``max_tokens``).
    - ``retain``: after a summary, the share of the budget the kept turns
      may fill, so that the next summary is some turns away rather than at
      the next step.
    - ``summary_instructions``: the summarizing call's system message.

    The instructions and the latest turn are always sent: a latest turn
    over the budget on its own fails the run ``context_exceeded``."""

    budget_tokens: int | None = None
    share: float = 0.75
    keep: Keep = "trim"
    summary_model: str | None = None
    summary_settings: Mapping[str, Any] | None = None
    summary_tokens: int = 1024
    retain: float = 0.5
    summary_instructions: str = SUMMARY_INSTRUCTIONS

    def __post_init__(self) -> None:
        if self.budget_tokens is not None and (
            isinstance(self.budget_tokens, bool)
            or not isinstance(self.budget_tokens, int)
            or self.budget_tokens < 1
        ):
            raise InvalidInput(
                f"History.budget_tokens must be a positive whole number, "
                f"not {self.budget_tokens!r:.40}"
            )
        if not isinstance(self.share, int | float) or not 0 < self.share <= 1:
            raise InvalidInput(
                f"History.share must be above 0 and at most 1, not {self.share!r:.40}"
            )
        if not callable(self.keep) and self.keep not in _KEEPS:
            raise InvalidInput(
                f"History.keep must be 'trim', 'summarize' or a function "
                f"keep(messages, budget), not {self.keep!r:.40}"
            )
        if (
            isinstance(self.summary_tokens, bool)
            or not isinstance(self.summary_tokens, int)
            or self.summary_tokens < 1
        ):
            raise InvalidInput("History.summary_tokens must be a positive whole number")
        if not isinstance(self.retain, int | float) or not 0 < self.retain <= 1:
            raise InvalidInput(
                f"History.retain must be above 0 and at most 1, not {self.retain!r:.40}"
            )
        if self.summary_model is not None and (
            not isinstance(self.summary_model, str) or not self.summary_model
        ):
            raise InvalidInput("History.summary_model must be a litellm model string")
        if not isinstance(self.summary_instructions, str) or not self.summary_instructions:
            raise InvalidInput("History.summary_instructions must be a text")
        budget = self.budget_tokens
        if self.summarizes and budget is not None and self.summary_tokens >= budget // 2:
            raise InvalidInput(
                f"History.summary_tokens ({self.summary_tokens}) must be under half of "
                f"budget_tokens ({budget})"
            )

    @property
    def summarizes(self) -> bool:
        return self.keep == "summarize"

    def budget(self, window: int | None, model: str) -> int:
        """The budget for ``model``, whose context window litellm gives as ``window``."""
        if self.budget_tokens is not None:
            return self.budget_tokens
        if window is None:
            raise InvalidInput(
                f"History() on model {model!r}: litellm does not know its context window; "
                "give History(budget_tokens=...)"
            )
        return max(1, int(window * self.share))


@dataclass(frozen=True)
class SummaryDue:
    """A summary to make before the next model call: of the conversation's
    messages ``start`` to ``covers`` (and the summary before them), with the
    request ``messages``."""

    start: int
    covers: int
    messages: list[Message]


def summary_record(content: str, covers: int) -> Message:
    """The history's record of a summary that stands for the conversation's
    first ``covers`` messages."""
    return {"role": HISTORY_SUMMARY, "content": content, "covers": covers}


def transcript(messages: Sequence[Message]) -> str:
    """The conversation's messages as text, for the summarizing call."""
    lines = []
    for message in messages:
        role = message.get("role")
        content = message.get("content")
        text = json.dumps(content) if content is not None else ""
        if isinstance(content, str):
            text = content
        if role == "tool":
            lines.append(f"tool result ({message.get('tool_call_id')}): {text}")
            continue
        for call in message.get("tool_calls") or ():
            function = call.get("function") or {}
            text += f"\n[calls {function.get('name')}({function.get('arguments')})]"
        lines.append(f"{role}: {text.strip()}")
    return "\n".join(lines)


Count = Callable[[Sequence[Message]], int]


class Window:
    """The requests of one execution under a :class:`History`: the history
    converted as :class:`~runner.core.steps.history.Request` does, each
    message counted once, as the history grows (so a step's work is its new
    messages, and a binary search over the turns).

    ``count`` counts messages' tokens (litellm's counter for the model);
    ``tools_tokens`` is what the tool schemas take of every request."""

    def __init__(
        self,
        history: History,
        budget: int,
        instructions: str,
        edits: Mapping[str, Any],
        count: Count,
        tools_tokens: int = 0,
    ) -> None:
        self.history = history
        self.budget = budget
        self.instructions = instructions
        self.edits = edits
        self.count = count
        self.tools_tokens = tools_tokens
        self._heads: dict[str, tuple[list[Message], int]] = {}
        self._reset()

    def _reset(self) -> None:
        self.conversation: list[Message] = []
        self.sums = [0]  # sums[i]: the tokens of the conversation's first i messages
        self.turns: list[int] = []  # where each turn starts in the conversation
        self.summary: Message | None = None
        self.upto = 0  # how many messages of the history are read
        # The sums are exact from this message on; from any earlier one the
        # conversation is over the budget (an execution's first read counts
        # back from the latest message only until it is).
        self.exact_from = 0
        self._sent: tuple[int, list[Message]] | None = None  # the last request, by upto

    # ------------------------------------------------------------ reading

    def _read(self, history: list[Message]) -> None:
        if len(history) < self.upto:  # not the history this was built from
            self._reset()
        fresh = self.upto == 0
        added = len(self.conversation)
        for message in history[self.upto :]:
            role = message.get("role")
            if role == HISTORY_SUMMARY:
                self.summary = message
                continue
            if role in ENGINE_ROLES:
                continue
            if self.edits and role == "assistant":
                message = as_ran(message, self.edits)
            if role == "user":
                self.turns.append(len(self.conversation))
            self.conversation.append(message)
        self.upto = len(history)
        if fresh:
            self._count_back()
            return
        for message in self.conversation[added:]:
            self.sums.append(self.sums[-1] + self.count([message]))

    def _count_back(self) -> None:
        """The sums of a history read whole: its messages counted from the
        latest back, until they are over the budget or reach the summary's
        turns. The older ones are never sent again (the history only grows),
        so a thread's run does not count its whole thread."""
        counts = [0] * len(self.conversation)
        total = 0
        stop = self.covered
        position = len(self.conversation) - 1
        while position >= stop:
            counts[position] = self.count([self.conversation[position]])
            total += counts[position]
            if total > self.budget:
                break
            position -= 1
        self.exact_from = max(stop, position + 1)
        self.sums = [0]
        for tokens in counts:
            self.sums.append(self.sums[-1] + tokens)

    @property
    def covered(self) -> int:
        """How many of the conversation's first messages the summary stands for."""
        if self.summary is None:
            return 0
        return min(int(self.summary.get("covers") or 0), len(self.conversation))

    def _head(self, summary: str | None) -> tuple[list[Message], int]:
        """The request's system message (the instructions, and the summary) and its tokens."""
        key = summary or ""
        if key not in self._heads:
            parts = [self.instructions] if self.instructions else []
            if summary:
                parts.append(f"{SUMMARY_PREFACE}\n{summary}")
            head: list[Message] = (
                [{"role": "system", "content": "\n\n".join(parts)}] if parts else []
            )
            self._heads = {key: (head, (self.count(head) if head else 0) + self.tools_tokens)}
        return self._heads[key]

    def _fits(self, start: int, head_tokens: int) -> bool:
        return start >= self.exact_from and head_tokens + self._suffix(start) <= self.budget

    def _suffix(self, start: int) -> int:
        return self.sums[-1] - self.sums[start]

    def _first_fitting(self, start: int, room: int) -> int | None:
        """The first turn at or after ``start`` from which the conversation
        takes at most ``room`` tokens; None if not even the latest turn fits."""
        candidates = self.turns[bisect.bisect_left(self.turns, max(start, self.exact_from)) :]
        # The suffixes shrink as the start moves on: the first that fits.
        low, high = 0, len(candidates)
        while low < high:
            middle = (low + high) // 2
            if self._suffix(candidates[middle]) <= room:
                high = middle
            else:
                low = middle + 1
        return candidates[low] if low < len(candidates) else None

    # ------------------------------------------------------------ requests

    def request(self, history: list[Message]) -> list[Message]:
        """The next model call's messages for ``history``, within the budget.
        Raises :class:`ContextExceeded` if the latest turn alone is over it.
        Asked again for the same history (the limits' estimate, then the
        call), it answers the same, without calling ``keep`` again."""
        self._read(history)
        if self._sent is None or self._sent[0] != self.upto:
            self._sent = (self.upto, self._shortened())
        return list(self._sent[1])

    def _shortened(self) -> list[Message]:
        start = self.covered
        summary = None if self.summary is None else str(self.summary.get("content") or "")
        head, head_tokens = self._head(summary)
        if self._fits(start, head_tokens):
            return [*head, *self.conversation[start:]]
        keep = self.history.keep
        if callable(keep):
            kept = keep([*head, *self.conversation[start:]], self.budget)
            if not isinstance(kept, list) or not all(isinstance(m, dict) for m in kept):
                raise InvalidInput("History.keep must return a list of messages")
            return kept
        # Trimmed (or, summarizing, a summary came out longer than asked).
        first = self._first_fitting(start, self.budget - head_tokens)
        if first is None:
            raise self._exceeded(head_tokens)
        return [*head, *self.conversation[first:]]

    def _exceeded(self, head_tokens: int) -> ContextExceeded:
        latest = self.turns[-1] if self.turns else 0
        # Counted whole here: the sums may have stopped counting inside it.
        tokens = sum(self.count([message]) for message in self.conversation[latest:])
        return ContextExceeded(
            f"the latest turn of the history takes {tokens} tokens and the "
            f"instructions and tools {head_tokens}: more than the history's budget of "
            f"{self.budget} tokens"
        )

    def summary_due(self, history: list[Message]) -> SummaryDue | None:
        """The summary to make before the next model call, if the history is
        over the budget and the agent summarizes. Raises :class:`ContextExceeded`
        if the latest turn alone is over it."""
        self._read(history)
        start = self.covered
        summary = None if self.summary is None else str(self.summary.get("content") or "")
        _, head_tokens = self._head(summary)
        if self._fits(start, head_tokens):
            return None
        # The new summary's room: at most summary_tokens, and its preface.
        plain_tokens = self._head(None)[1]
        room = (
            self.budget
            - plain_tokens
            - self.history.summary_tokens
            - self.count([{"role": "system", "content": SUMMARY_PREFACE}])
        )
        target = int(self.budget * self.history.retain) - (self.budget - room)
        covers = self._first_fitting(start, target) if target > 0 else None
        if covers is None:
            covers = self._first_fitting(start, room)
        if covers is None:
            raise self._exceeded(plain_tokens)
        if covers <= start:  # an earlier summary longer than asked: the request trims
            return None
        # The summarizing request must fit the budget too: it takes fewer
        # turns if need be (the next step summarizes the rest), down to one.
        covers = self._summarizable(summary, start, covers)
        while True:
            messages = self._summary_request(summary, start, covers)
            if self.count(messages) <= self.budget:
                return SummaryDue(start, covers, messages)
            earlier = bisect.bisect_left(self.turns, covers) - 1
            if earlier < 0 or self.turns[earlier] <= start:
                raise self._unsummarizable()
            covers = self.turns[earlier]

    def _summarizable(self, summary: str | None, start: int, covers: int) -> int:
        """The most of the turns from ``start`` to ``covers`` that a
        summarizing request holds within the budget, by the messages' counts
        (counted now where the sums have none: the work is the turns summarized)."""
        total = self.count(self._summary_request(summary, start, start))
        upto = start
        for position in range(start, covers):
            if position >= self.exact_from:
                total += self.sums[position + 1] - self.sums[position]
            else:
                total += self.count([self.conversation[position]])
            if total > self.budget:
                break
            following = position + 1
            if following == covers or self.conversation[following].get("role") == "user":
                upto = following
        if upto == start:
            raise self._unsummarizable()
        return upto

    def _unsummarizable(self) -> ContextExceeded:
        return ContextExceeded(
            f"a turn of the history is too long to summarize within the history's "
            f"budget of {self.budget} tokens"
        )

    def _summary_request(self, summary: str | None, start: int, covers: int) -> list[Message]:
        said = transcript(self.conversation[start:covers])
        body = f"The conversation:\n{said}"
        if summary:
            body = f"The summary so far:\n{summary}\n\n{body}"
        return [
            {"role": "system", "content": self.history.summary_instructions},
            {"role": "user", "content": body},
        ]
