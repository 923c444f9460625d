"""A provider's ``Retry-After`` is parsed as HTTP says and capped (issue 8).

``Retry-After`` is ``delay-seconds`` (digits only) or an HTTP-date (RFC 9110
§10.2.3); ``retry-after-ms``, which some providers send, is honoured when it is
a finite number of milliseconds, 0 or more. Anything else is absent. What a
provider may ask for is capped at ``RUNWRIGHT_MAX_RETRY_AFTER_SECONDS``
(default one day): a longer ask waits the cap, if the retry policy allows
waiting that long; a wait past the policy's ``max_elapsed`` fails the run
``model_error`` saying why. Never ``internal_error``, never a retry time
centuries away.

Every case goes through the engine and the real litellm path against a
loopback server answering 429 (the durable retry path: the run goes back to
``queued`` with a retry time), then recovers and completes.
"""

from __future__ import annotations

import dataclasses
import email.utils
from collections.abc import Iterator
from datetime import datetime, timedelta

import pytest

from runner import Agent, Engine
from runner.core.retry import RetryPolicy
from store.models import Run, RunStatus, utcnow
from tests.helpers import force_retry_due, unique
from tests.provider import Provider, answer

DAY = 86400.0
# Backoff 30 s to 60 s, no time limit: only the provider's ask can go far.
PATIENT = RetryPolicy(initial_backoff=30, max_backoff=60, max_attempts=5, max_elapsed=None)
# The default's shape: half an hour in all.
HALF_HOUR = RetryPolicy(initial_backoff=30, max_backoff=60, max_attempts=5, max_elapsed=1800)


@pytest.fixture
def provider() -> Iterator[Provider]:
    with Provider(lambda step, body: answer("recovered")) as server:
        yield server


def _agent(server: Provider, policy: RetryPolicy) -> str:
    name = unique("retry-after")
    Agent(
        name=name,
        model="openai/loopback",
        model_settings={"api_base": server.base_url, "api_key": "sk-loopback"},
        retry=policy,
    )
    return name


def _http_date(when: datetime) -> str:
    return email.utils.format_datetime(when, usegmt=True)


def _queued(run: Run | None) -> datetime:
    assert run is not None, "the execution returned no run"
    assert run.status is RunStatus.QUEUED, (run.status, run.error)
    assert run.error is None and run.retry is not None and run.retry.attempts == 1
    assert "RateLimitError" in run.retry.error
    assert run.retry_at is not None
    return run.retry_at


def _completes(engine: Engine, server: Provider, run_id: str) -> None:
    server.recover()
    force_retry_due(engine.store, run_id)
    done = engine.execute(run_id)
    assert done is not None and done.status is RunStatus.COMPLETED, done and done.error
    assert done.output == "recovered" and done.retry is None


# Header values that are not a delay the HTTP specification allows: absent,
# so the policy's own backoff (30 s to 60 s, jitter in the upper half) decides.
NOT_A_DELAY = [
    pytest.param("inf", id="inf"),
    pytest.param("-inf", id="-inf"),
    pytest.param("nan", id="nan"),
    pytest.param("1e12", id="1e12"),
    pytest.param("1e308", id="1e308"),
    pytest.param("1e400", id="1e400"),
    pytest.param("-5", id="negative"),
    pytest.param("1.5", id="fraction"),
    pytest.param("+5", id="plus-sign"),
    pytest.param("0x10", id="hex"),
    pytest.param("soon", id="garbage"),
    pytest.param("5 seconds", id="trailing-words"),
    pytest.param("Fri, 31 Feb 2099 25:61:00 GMT", id="bad-date"),
]


@pytest.mark.parametrize("value", NOT_A_DELAY)
def test_a_retry_after_that_is_not_a_delay_is_absent(
    engine: Engine, provider: Provider, value: str
) -> None:
    """Before: ``inf``, ``1e12``, ``1e308`` failed the run ``internal_error``
    (an OverflowError in the date arithmetic)."""
    run = engine.start(_agent(provider, PATIENT))
    provider.fail(429, retry_after=value)
    before = utcnow()
    at = _queued(engine.execute(run.id))
    assert before + timedelta(seconds=14) < at < utcnow() + timedelta(seconds=61)
    assert len(provider.answered(429)) == 3  # absent: the in-call retries went on
    _completes(engine, provider, run.id)


@pytest.mark.parametrize(
    "value",
    [
        pytest.param("99999999999", id="99999999999"),  # the year 5195, before
        pytest.param("9" * 400, id="400-digits"),  # more than a float holds
        pytest.param("Fri, 31 Dec 9999 23:59:59 GMT", id="the-year-9999"),
    ],
)
def test_a_retry_after_past_the_cap_waits_the_cap(
    engine: Engine, provider: Provider, value: str
) -> None:
    """A policy without a time limit waits at most a day
    (``RUNWRIGHT_MAX_RETRY_AFTER_SECONDS``), however long the provider asks."""
    run = engine.start(_agent(provider, PATIENT))
    provider.fail(429, retry_after=value)
    before = utcnow()
    at = _queued(engine.execute(run.id))
    assert before + timedelta(seconds=DAY - 1) <= at <= utcnow() + timedelta(seconds=DAY)
    assert len(provider.answered(429)) == 1  # no in-call retry sooner than that
    _completes(engine, provider, run.id)


def test_the_cap_is_a_setting(engine: Engine, provider: Provider) -> None:
    capped = Engine(
        engine.store,
        leases=engine.leases,
        settings=dataclasses.replace(engine.settings, max_retry_after_seconds=600),
        model_retries=2,
        model_backoff_seconds=0.01,
    )
    try:
        run = capped.start(_agent(provider, PATIENT))
        provider.fail(429, retry_after="3600")
        before = utcnow()
        at = _queued(capped.execute(run.id))
        assert before + timedelta(seconds=599) <= at <= utcnow() + timedelta(seconds=600)
        _completes(capped, provider, run.id)
    finally:
        capped.close()


@pytest.mark.parametrize(
    ("headers", "seconds"),
    [
        pytest.param({"Retry-After": "120"}, 120, id="delay-seconds"),
        pytest.param({"Retry-After": " 120 "}, 120, id="delay-seconds-with-spaces"),
        pytest.param({"retry-after-ms": "120000"}, 120, id="retry-after-ms"),
        pytest.param({"retry-after-ms": "90500.5"}, 90.5, id="retry-after-ms-fraction"),
        # retry-after-ms that says nothing usable leaves Retry-After to speak.
        pytest.param({"retry-after-ms": "inf", "Retry-After": "120"}, 120, id="ms-inf"),
        pytest.param({"retry-after-ms": "-1", "Retry-After": "120"}, 120, id="ms-negative"),
        pytest.param({"retry-after-ms": "nan", "Retry-After": "120"}, 120, id="ms-nan"),
    ],
)
def test_a_valid_retry_after_is_honoured(
    engine: Engine, provider: Provider, headers: dict[str, str], seconds: float
) -> None:
    run = engine.start(_agent(provider, PATIENT))
    provider.fail(429, headers=headers)
    before = utcnow()
    at = _queued(engine.execute(run.id))
    # A floor on the wait, never shortened; the backoff (30 s to 60 s) is below it.
    assert before + timedelta(seconds=seconds - 1) <= at <= utcnow() + timedelta(seconds=seconds)
    assert len(provider.answered(429)) == 1
    _completes(engine, provider, run.id)


@pytest.mark.parametrize(
    "form",
    [
        pytest.param("imf-fixdate", id="imf-fixdate"),
        pytest.param("rfc850", id="rfc850"),
        pytest.param("asctime", id="asctime"),
    ],
)
def test_an_http_date_is_honoured(engine: Engine, provider: Provider, form: str) -> None:
    """The three forms of HTTP-date a recipient must accept (RFC 9110 §5.6.7)."""
    when = (utcnow() + timedelta(seconds=180)).replace(microsecond=0)
    value = {
        "imf-fixdate": _http_date(when),
        "rfc850": when.strftime("%A, %d-%b-%y %H:%M:%S GMT"),
        "asctime": when.strftime("%a %b ") + f"{when.day:>2}" + when.strftime(" %H:%M:%S %Y"),
    }[form]
    run = engine.start(_agent(provider, PATIENT))
    provider.fail(429, retry_after=value)
    at = _queued(engine.execute(run.id))
    assert when - timedelta(seconds=1) <= at <= when + timedelta(seconds=1)
    _completes(engine, provider, run.id)


def test_a_date_in_the_past_asks_for_no_pause(engine: Engine, provider: Provider) -> None:
    run = engine.start(_agent(provider, PATIENT))
    provider.fail(429, retry_after=_http_date(utcnow() - timedelta(days=3)))
    before = utcnow()
    at = _queued(engine.execute(run.id))
    assert before + timedelta(seconds=14) < at < utcnow() + timedelta(seconds=61)
    _completes(engine, provider, run.id)


@pytest.mark.parametrize(
    ("value", "why"),
    [
        pytest.param(
            "3600",
            "the provider asked to wait 3600 s, past the retry policy's max_elapsed of 1800 s",
            id="past-max-elapsed",
        ),
        pytest.param(
            "99999999999",
            "the provider asked to wait 99999999999 s, more than "
            "RUNWRIGHT_MAX_RETRY_AFTER_SECONDS=86400; 86400 s is past the retry policy's "
            "max_elapsed of 1800 s",
            id="past-the-cap-and-max-elapsed",
        ),
    ],
)
def test_a_wait_past_the_policy_fails_the_run_model_error_saying_why(
    engine: Engine, provider: Provider, value: str, why: str
) -> None:
    run = engine.start(_agent(provider, HALF_HOUR))
    provider.fail(429, retry_after=value)
    failed = engine.execute(run.id)
    assert failed is not None and failed.status is RunStatus.FAILED
    assert failed.error is not None and failed.error.code == "model_error"
    assert why in failed.error.message, failed.error.message
    assert "RateLimitError" in failed.error.message
    assert failed.retry is not None and failed.retry_at is None
    assert engine.get_run(run.id).error == failed.error
    assert len(provider.answered(429)) == 1
