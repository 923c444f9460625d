"""What the step loop and its tool calls use of the engine, the store aside
(that is the journal's: runner/core/journal.py). The engine's
:class:`~runner.core.engine.deps.Deps` is one; the steps take it as this protocol,
so that they import nothing of the engine above them."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from concurrent.futures import Executor
from datetime import timedelta
from typing import Any, Protocol

from runner.core.agent import Agent
from runner.core.clock import Clock
from runner.core.limits.admission import Admission
from runner.core.observe import Observer
from runner.core.retry import RetryPolicy
from runner.core.settings import Settings
from store.models import NewApproval, Run


class Deltas(Protocol):
    def token(self, run_id: str, delta: dict[str, Any]) -> bool: ...


class SigningKeys(Protocol):
    @property
    def current_id(self) -> str: ...


class Services(Protocol):
    """What the step loop and its tool calls use of the engine (its
    :class:`~runner.core.engine.deps.Deps`), the store aside: that is the journal's."""

    @property
    def observer(self) -> Observer: ...
    @property
    def clock(self) -> Clock: ...
    @property
    def feed(self) -> Deltas: ...
    @property
    def settings(self) -> Settings: ...
    @property
    def tokens(self) -> SigningKeys: ...
    @property
    def retry_policy(self) -> RetryPolicy: ...
    @property
    def model_retries(self) -> int: ...
    @property
    def model_backoff_seconds(self) -> float: ...
    @property
    def notify_delay(self) -> timedelta: ...
    @property
    def tool_executor(self) -> Executor: ...
    @property
    def admission(self) -> Admission | None: ...

    def send(self, run_ids: Iterable[str]) -> None: ...

    def wake(self, run_ids: Sequence[str]) -> None: ...

    async def notify_approvals(
        self, agent: Agent, run: Run, new: Sequence[NewApproval]
    ) -> None: ...
