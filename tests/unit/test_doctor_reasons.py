"""What ``runwright doctor`` composes from many findings (runner/cli/doctor.py,
issue 49): the agents no live worker has and the failing tools, the most
pressing first and named, the rest counted, in a line that the doctor's cut
never reaches, however long the names (an agent's is at most 128 characters,
a tool's 64)."""

from __future__ import annotations

from runner.cli.doctor import REASON_CHARS, failing_reason, throttled_reason, unserved_reason


def test_the_agent_whose_runs_wait_comes_first_and_the_others_are_counted() -> None:
    missing = [f"agent-{n:02}" for n in range(11)] + ["zz-waits"]
    waiting = {name: 0 for name in missing} | {"zz-waits": 2}
    reason = unserved_reason(sorted(missing), waiting)
    assert reason.startswith(
        "no live worker has agent 'zz-waits' (2 run(s) wait for one), nor 11 other agent(s) "
        "with open or recent runs (none of their runs waits): start a worker whose "
        "RUNWRIGHT_AGENTS names their modules"
    ), reason


def test_agents_are_named_by_the_runs_that_wait_for_them_and_the_rest_counted() -> None:
    waiting = {"a": 1, "b": 5, "c": 0, "d": 3, "e": 2, "f": 0}
    reason = unserved_reason(sorted(waiting), waiting)
    assert reason.startswith(
        "no live worker has agent 'b' (5 run(s) wait for one), nor agent 'd' (3 run(s)), "
        "nor agent 'e' (2 run(s)), nor 3 other agent(s) with open or recent runs "
        "(1 run(s) wait for them)"
    ), reason


def test_one_agent_reads_as_it_always_did() -> None:
    assert unserved_reason(["newcomer"], {"newcomer": 1}) == (
        "no live worker has agent 'newcomer' (1 run(s) wait for one): start a worker whose "
        "RUNWRIGHT_AGENTS names its module (runwright workers lists what each serves)"
    )


def test_the_longest_names_still_fit_in_a_line() -> None:
    agents = [f"{n:02}" + "a" * 126 for n in range(40)]
    reason = unserved_reason(agents, {name: 1000 + n for n, name in enumerate(agents)})
    assert len(reason) <= REASON_CHARS
    assert reason.startswith(f"no live worker has agent {agents[-1]!r} (1039 run(s)"), reason
    assert "other agent(s) with open or recent runs" in reason

    rows = [
        {
            "agent": f"{n:02}" + "a" * 126,
            "tool": f"{n:02}" + "t" * 62,
            "calls": 1000,
            "failures": 999 - n,
            "last_error": "x" * 5000,
        }
        for n in range(40)
    ]
    reason = failing_reason(rows)
    assert len(reason) <= REASON_CHARS
    assert reason.startswith(f"tool {rows[0]['tool']!r} of agent {rows[0]['agent']!r} failed 999")
    assert "39 other tool(s) failing most of their calls" in reason, reason


def test_failing_tools_after_the_first_are_named_with_their_counts() -> None:
    rows = [
        {
            "agent": "support",
            "tool": "lookup",
            "calls": 6,
            "failures": 5,
            "last_error": "refused\n",
        },
        {"agent": "billing", "tool": "charge", "calls": 5, "failures": 3, "last_error": "declined"},
    ]
    assert failing_reason(rows) == (
        "tool 'lookup' of agent 'support' failed 5 of its 6 calls in the last hour (last "
        "error: refused); also 'charge' of agent 'billing' (3 of 5): runwright show RUN "
        "prints each call's error"
    )


def test_models_answered_429_without_a_limit_latest_first_and_the_rest_counted() -> None:
    seen = {f"openai/model-{n:02}": 1_700_000_000.0 + n for n in range(8)}
    seen["x" * 190] = 1_600_000_000.0  # a long name, and the oldest
    reason = throttled_reason(sorted(seen), seen)
    assert reason.startswith(
        "model 'openai/model-07' was answered 429 in the last day (last at 2023-11-14 22:13 UTC) "
        "and has no limit in force, nor 'openai/model-06', nor 'openai/model-05', nor 6 other "
        "model(s) answered 429: set RUNWRIGHT_MODEL_LIMITS "
        """(e.g. '{"openai/model-07": {"rpm": ..., "tpm": ...}}')"""
    ), reason
    assert len(reason) <= REASON_CHARS
