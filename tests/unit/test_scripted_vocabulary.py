"""The scripted models' vocabulary (issue 25): which reply a request gets,
errors in a list and the step they belong to, ``assert_complete()``,
``output()``, and the guard that keeps a test from calling real models."""

from __future__ import annotations

import json
import threading
from typing import Any

import pydantic
import pytest

from runner.core import model as model_adapter
from runner.core.errors import InvalidInput, ModelError, ModelRequestsBlocked, RunwrightError
from runner.core.retry import retry_after
from runner.core.runtime import runtime
from runner.testing import (
    Reply,
    Request,
    ScriptedModel,
    ScriptExhausted,
    UnconsumedModelSteps,
    UnexpectedModelCall,
    allow_model_requests,
    block_model_requests,
    call,
    output,
    rate_limited,
    server_error,
    text,
    timeout,
    tools,
)
from tests.helpers import unique

BLOCKED = (
    "model requests are blocked in this test, and the run called 'openai/gpt-4o-mini'; "
    "to allow them, mark the test @pytest.mark.runwright_allow_model_requests "
    "or run the code inside runner.testing.allow_model_requests()"
)


def at(step: int) -> Request:
    """A request for ``step``: the trigger and ``step - 1`` assistant messages."""
    messages: list[Any] = [{"role": "user", "content": "go"}]
    for n in range(1, step):
        messages += [{"role": "assistant", "content": f"reply {n}"}]
    return Request(messages, [])


def kinds(model: ScriptedModel, *steps: int) -> list[str]:
    """What the model answers to a request of each step in turn, in words."""
    return [model.choose(at(step)).describe() for step in steps]


# ------------------------------------------------------------ choosing replies


def test_a_list_is_read_by_the_requests_step() -> None:
    model = ScriptedModel(unique("list"), [text("one"), tools(call("lookup")), text("three")])
    assert kinds(model, 3, 1, 2, 2) == [
        "text 'three'",
        "text 'one'",
        "tools(lookup)",
        "tools(lookup)",
    ]


def test_a_function_may_answer_a_reply_or_a_str() -> None:
    model = ScriptedModel(
        unique("function"),
        lambda request: "plain words" if request.step == 1 else tools(call("x")),
    )
    assert model.choose(at(1)) == text("plain words")
    assert model.choose(at(2)) == tools(call("x"))


def test_a_step_is_served_its_errors_in_order_then_its_reply() -> None:
    script = [
        rate_limited(retry_after=2),
        server_error(),
        text("first"),
        timeout(),
        text("second"),
    ]
    model = ScriptedModel(unique("errors"), script)
    assert kinds(model, 1, 1, 1, 1) == [
        "error rate_limit, retry_after=2",
        "error server_error",
        "text 'first'",
        "text 'first'",  # asked again (a crash before its checkpoint): the same reply
    ]
    assert kinds(model, 2, 2) == ["error timeout", "text 'second'"]
    with pytest.raises(ScriptExhausted, match="has 5 replies for 2 step"):
        model.choose(at(3))


def test_a_process_that_resumes_a_run_meets_the_steps_errors_again() -> None:
    """The count of errors served is this process's: a worker resuming a run
    at step 2 starts step 2 at its first error."""
    script = [server_error(), text("first"), timeout(), server_error(), text("second")]
    worker = ScriptedModel(unique("resumed"), script)
    assert kinds(worker, 2, 2, 2) == ["error timeout", "error server_error", "text 'second'"]


def test_errors_at_the_end_are_one_more_step_without_a_reply() -> None:
    model = ScriptedModel(unique("tail"), [text("one"), server_error(), timeout()])
    assert kinds(model, 1, 2, 2) == ["text 'one'", "error server_error", "error timeout"]
    with pytest.raises(ScriptExhausted, match=r"2 error\(s\) after them, all served"):
        model.choose(at(2))


def test_a_new_script_starts_afresh() -> None:
    model = ScriptedModel(unique("again"), [server_error(), text("one")])
    assert kinds(model, 1, 1) == ["error server_error", "text 'one'"]
    model.script = [timeout(), text("two")]
    assert kinds(model, 1, 1) == ["error timeout", "text 'two'"]
    model.assert_complete()


# ---------------------------------------------------------- assert_complete()


def test_a_script_served_exactly_is_complete() -> None:
    model = ScriptedModel(unique("exact"), [server_error(), text("one"), text("two")])
    kinds(model, 1, 1, 2)
    model.assert_complete()


def test_a_call_past_the_end_fails_and_is_reported() -> None:
    model = ScriptedModel(unique("extra"), [text("one")])
    kinds(model, 1)
    with pytest.raises(ScriptExhausted):
        model.choose(at(2))
    assert [r.step for r in model.unexpected] == [2]
    with pytest.raises(UnexpectedModelCall) as caught:
        model.assert_complete()
    assert str(caught.value) == (
        f"{model.model} was called 1 time(s) more than its script allows (its script holds "
        "1 replies for 1 step(s); 0 call(s) in all): the call(s) past its end asked for step(s) 2"
    )


def test_replies_never_served_are_named_with_their_steps() -> None:
    model = ScriptedModel(
        unique("short"), [text("one"), rate_limited(retry_after=1), tools(call("lookup"))]
    )
    kinds(model, 1)
    with pytest.raises(UnconsumedModelSteps) as caught:
        model.assert_complete()
    assert str(caught.value) == (
        f"{model.model} served 1 of the 3 replies of its script (2 step(s); 0 call(s) in all); "
        "never served: step 2 error rate_limit, retry_after=1 (reply 2); "
        "step 2 tools(lookup) (reply 3)"
    )


def test_a_function_script_is_always_complete() -> None:
    model = ScriptedModel(unique("open"), lambda request: text("any"))
    model.assert_complete()
    kinds(model, 1, 7)
    model.assert_complete()


def test_the_mismatch_errors_are_assertions_and_runwright_errors() -> None:
    for cls in (UnexpectedModelCall, UnconsumedModelSteps):
        assert issubclass(cls, AssertionError) and issubclass(cls, RunwrightError)


# ------------------------------------------------------------------- output()


class Verdict(pydantic.BaseModel):
    severity: int
    summary: str


def test_output_is_the_final_result_call_with_the_values_json() -> None:
    for value in (Verdict(severity=2, summary="disk"), {"severity": 2, "summary": "disk"}):
        message = output(value).message(step=1)
        (sent,) = message["tool_calls"]
        assert sent["function"]["name"] == "final_result"
        assert json.loads(sent["function"]["arguments"]) == {"severity": 2, "summary": "disk"}
        assert Verdict.model_validate_json(sent["function"]["arguments"]) == Verdict(
            severity=2, summary="disk"
        )


def test_output_takes_a_model_or_a_dict_only() -> None:
    with pytest.raises(InvalidInput, match="not list"):
        output([1, 2])  # type: ignore[arg-type]


def test_retry_after_belongs_to_an_error_and_is_a_pause() -> None:
    with pytest.raises(InvalidInput, match="belongs to an error"):
        Reply(content="x", retry_after=1)
    with pytest.raises(InvalidInput, match="seconds"):
        rate_limited(retry_after=-1)
    assert rate_limited(retry_after=3).headers() == {"retry-after": "3"}
    assert rate_limited(retry_after=0.25).headers() == {
        "retry-after": "1",
        "retry-after-ms": "250",
    }
    assert rate_limited().headers() == {}


# ------------------------------------------ through runner.core.model.complete()


def _complete(
    model: str, settings: dict[str, Any] | None = None, **kwargs: Any
) -> model_adapter.ModelReply:
    """On the runtime's loop, where runs call models (a loop of the test's own
    would close with litellm's logging task still on it)."""
    messages = [{"role": "user", "content": "go"}]
    call = model_adapter.complete(model, messages, [], settings or {}, **kwargs)
    return runtime().run(call, timeout=60)


def test_complete_waits_the_retry_after_of_a_scripted_429_with_its_sleep() -> None:
    model = ScriptedModel(unique("limited"), [rate_limited(retry_after=4), text("ok")])
    waits: list[float] = []

    async def sleep(seconds: float) -> None:
        waits.append(seconds)

    reply = _complete(model.model, backoff_seconds=0.01, sleep=sleep)
    assert reply.message["content"] == "ok"
    assert waits == [4.0]  # the provider's pause, not the 0.01 s backoff
    model.assert_complete()


def test_a_scripted_429_carries_its_retry_after_to_the_model_error() -> None:
    model = ScriptedModel(unique("patient"), [rate_limited(retry_after=0.5), text("ok")])
    with pytest.raises(ModelError) as caught:
        _complete(model.model, retries=0)
    assert caught.value.transient and caught.value.retry_after == 0.5
    assert isinstance(caught.value.__cause__, Exception)
    assert retry_after(caught.value.__cause__) == 0.5


def test_a_call_past_the_script_fails_at_once_not_retried() -> None:
    model = ScriptedModel(unique("over"), [])
    with pytest.raises(ModelError, match=r"has 0 replies for 0 step\(s\); step 1") as caught:
        _complete(model.model, backoff_seconds=0)
    assert not caught.value.transient and model.call_count == 1


# --------------------------------------------------------- the requests guard


def test_a_blocked_real_model_fails_with_one_line_before_any_request() -> None:
    with block_model_requests(), pytest.raises(ModelRequestsBlocked) as caught:
        _complete("openai/gpt-4o-mini", settings={"api_base": "http://127.0.0.1:9"})
    assert str(caught.value) == BLOCKED
    assert isinstance(caught.value, ModelError) and not caught.value.transient
    assert caught.value.retry_after is None


def test_scripted_models_answer_while_requests_are_blocked() -> None:
    model = ScriptedModel(unique("allowed"), [text("ok")])
    with block_model_requests():
        assert _complete(model.model).message["content"] == "ok"


def test_blocks_nest_and_restore_what_they_found() -> None:
    assert not model_adapter.requests_blocked()
    with block_model_requests():
        assert model_adapter.requests_blocked()
        with allow_model_requests():
            assert not model_adapter.requests_blocked()
            with block_model_requests():
                assert model_adapter.requests_blocked()
            assert not model_adapter.requests_blocked()
        assert model_adapter.requests_blocked()
    assert not model_adapter.requests_blocked()


def test_a_block_is_the_processs_and_ends_on_an_error() -> None:
    seen: list[bool] = []
    with pytest.raises(RuntimeError), block_model_requests():
        thread = threading.Thread(target=lambda: seen.append(model_adapter.requests_blocked()))
        thread.start()
        thread.join()
        raise RuntimeError("the test failed inside the block")
    assert seen == [True]
    assert not model_adapter.requests_blocked()
