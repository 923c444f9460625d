"""``runwright limits``: each model limit in force, what is in use under it
now, and the runs parked on it (docs/operations.md, "Flow control").

A line per key: every pattern in force (declared in code by the agent
modules, or in ``RUNWRIGHT_MODEL_LIMITS``) and every key runs are parked on.
What is in use is read from the limiter's Redis (runner/core/limits/limiter.py)
for a model's own key; a pattern ending in ``*`` has none of its own, since
each model under it keeps its own budget."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import TYPE_CHECKING

import click

from runner.cli.as_json import Document, KeyLine, json_option, limits_json
from runner.cli.terminal import say

if TYPE_CHECKING:
    from store.models import ParkedKey

ENV = "RUNWRIGHT_MODEL_LIMITS"


@click.command("limits")
@json_option
def limits(as_json: bool) -> Document | None:
    """Show each model limit: what it allows, what is in use now, and the runs
    parked on it (their tenants, and when the first may go)."""
    lines = key_lines()
    if as_json:
        return limits_json(lines)
    if not lines:
        say(
            f"no model limit is in force and no run is parked: declare limits in code "
            f"(runner.core.limits.register) or in {ENV}"
        )
        return None
    for line in lines:
        say(describe(line))
    return None


def key_lines() -> list[KeyLine]:
    """Every pattern in force and every key with parked runs, by key."""
    from runner.core.agent import registry
    from runner.core.coordination.leases import connect
    from runner.core.limits import Limiter, ModelLimits, configured
    from runner.core.limits.model_limits import WILDCARD
    from runner.core.settings import Settings, open_store, resolve

    settings = resolve(Settings.from_env())
    assert settings.redis_url is not None
    registry.load(settings.agents)  # the limits their modules declare
    in_force = configured(settings.model_limits)
    from_env = ModelLimits.from_json(settings.model_limits) if settings.model_limits else None
    store = open_store(settings)
    try:
        parked = {found.key: found for found in store.parked()}
    finally:
        store.close()
    patterns = dict(in_force.items())
    client = connect(settings.redis_url)
    try:
        limiter = Limiter(client)
        lines = []
        for key in sorted(set(patterns) | set(parked)):
            governing = in_force.for_model(key)
            pattern, limit = governing if governing is not None else (None, None)
            source = None
            if pattern is not None:
                in_env = from_env is not None and pattern in dict(from_env.items())
                source = ENV if in_env else "code"
            in_use = None if key.endswith(WILDCARD) else limiter.state(key)
            lines.append(KeyLine(key, pattern, source, limit, in_use, parked.get(key)))
        return lines
    finally:
        client.close()


def describe(line: KeyLine) -> str:
    """One line: the key, its limit, what is in use, the runs parked on it."""
    return f"{line.key}  " + "; ".join(
        [_limit_words(line), _use_words(line), _parked_words(line.parked)]
    )


def _limit_words(line: KeyLine) -> str:
    if line.limit is None:
        return "limit: none in force"
    limit = line.limit
    parts = [
        f"{name} {value}"
        for name, value in (
            ("rpm", limit.rpm),
            ("tpm", limit.tpm),
            ("max_concurrent", limit.max_concurrent),
        )
        if value is not None
    ]
    under = "" if line.pattern == line.key else f" under {line.pattern!r}"
    return f"limit: {', '.join(parts)} ({line.source}{under})"


def _use_words(line: KeyLine) -> str:
    state = line.in_use
    if state is None:
        return "in use: per model (each model under the pattern has its own budget)"
    said = (
        f"in use: {state['requests_in_window']} request(s), "
        f"{state['tokens_in_window']} token(s) this minute"
    )
    if line.limit is not None and line.limit.max_concurrent is not None:
        # Slots are taken only under a concurrency limit.
        said += f", {len(state['holders'])} call(s) in flight"
    if state["factor"] < 1:
        said += f", {state['factor']:.0%} of the limit in force (lowered by the provider)"
    blocked = state["blocked_until"]
    if blocked is not None:
        said += f", blocked until {at(blocked)}"
    return said


def _parked_words(parked: ParkedKey | None) -> str:
    if parked is None:
        return "parked: none"
    tenants = ", ".join(
        f"{'no tenant' if tenant is None else tenant} {runs}"
        for tenant, runs in sorted(parked.tenants.items(), key=lambda item: -item[1])
    )
    return (
        f"parked: {parked.runs} run(s) ({tenants}), the first may go at "
        f"{parked.next_at.astimezone(UTC):%Y-%m-%d %H:%M:%S} UTC"
    )


def at(epoch: float) -> str:
    return f"{datetime.fromtimestamp(epoch, UTC):%Y-%m-%d %H:%M:%S} UTC"
