"""AbortSignal.fired(): the future the step loop and the tool calls race
their work against (runner/core/steps/run_context.py)."""

from __future__ import annotations

import asyncio
import threading

import pytest

from runner.core.errors import LoopMisuse
from runner.core.steps.run_context import AbortReason, AbortSignal


async def _signal() -> AbortSignal:
    return AbortSignal(asyncio.get_running_loop())


def test_an_abort_from_another_thread_resolves_the_future_with_its_reason() -> None:
    async def main() -> AbortReason:
        signal = await _signal()
        fired = signal.fired()
        assert not fired.done()
        threading.Thread(target=signal.abort, args=(AbortReason.CANCEL,)).start()
        return await asyncio.wait_for(fired, 5)

    assert asyncio.run(main()) is AbortReason.CANCEL


def test_a_signal_aborted_before_is_fired_at_once_and_the_first_reason_wins() -> None:
    async def main() -> None:
        signal = await _signal()
        signal.abort(AbortReason.DRAIN)
        signal.abort(AbortReason.CANCEL)
        fired = signal.fired()
        assert fired.done() and fired.result() is AbortReason.DRAIN

    asyncio.run(main())


def test_a_race_the_work_won_leaves_the_shared_future_to_the_next_race() -> None:
    async def main() -> tuple[bool, AbortReason]:
        signal = await _signal()
        work = asyncio.ensure_future(asyncio.sleep(0, "done"))
        done, _ = await asyncio.wait({work, signal.fired()}, return_when=asyncio.FIRST_COMPLETED)
        assert done == {work}
        later = asyncio.ensure_future(asyncio.sleep(30))
        asyncio.get_running_loop().call_later(0.01, signal.abort, AbortReason.TIMEOUT)
        done, _ = await asyncio.wait({later, signal.fired()}, return_when=asyncio.FIRST_COMPLETED)
        later.cancel()
        return signal.fired() in done, await signal.fired()

    won, reason = asyncio.run(main())
    assert won and reason is AbortReason.TIMEOUT


def test_the_event_waiters_still_wake() -> None:
    async def main() -> AbortReason:
        signal = await _signal()
        signal.fired()
        waiter = asyncio.ensure_future(signal.wait())
        await asyncio.sleep(0)
        signal.abort(AbortReason.LEASE_LOST)
        return await asyncio.wait_for(waiter, 5)

    assert asyncio.run(main()) is AbortReason.LEASE_LOST


def test_the_future_belongs_to_one_loop() -> None:
    signal = AbortSignal()

    async def first() -> None:
        signal.fired()

    asyncio.run(first())
    with pytest.raises(LoopMisuse, match="loop it was first called on"):
        asyncio.run(first())


def test_an_abort_after_the_loop_closed_is_harmless() -> None:
    signal = AbortSignal()

    async def main() -> asyncio.Future[AbortReason]:
        return signal.fired()

    fired = asyncio.run(main())
    signal.abort(AbortReason.CANCEL)  # its loop is closed: nothing to resolve, no error
    assert signal.aborted and not fired.done()
