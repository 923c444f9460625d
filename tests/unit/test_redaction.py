"""Redaction (runner/core/redaction.py): each built-in pattern's hits and
near misses, values walked without being changed, functions that fail
closed, bad input refused at once, and the egress points that need no
service: the log formats and the event stream's public shape."""

from __future__ import annotations

import copy
import json
import logging
import re
import time
from collections.abc import Iterator

import pytest
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

import runner.core.agent as agent_module
from runner import Agent
from runner.core.errors import ConfigurationError, InvalidInput
from runner.core.observe import ModelCall, ToolCall
from runner.core.observe.logs import LINE_FIELDS, JsonFormatter, TextFormatter
from runner.core.redaction import BUILTINS, Redactor, luhn
from runner.core.settings import Settings
from runner.observe.otel import OtelObserver
from runner.sse import public_event
from store.events import EventType, RunEvent
from store.models import Run, RunStatus, TriggerEnvelope, Usage, utcnow
from tests.helpers import unique


@pytest.fixture(autouse=True)
def _no_project_default(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """These tests say what the project's RUNWRIGHT_REDACT is: none, unless set."""
    monkeypatch.delenv("RUNWRIGHT_REDACT", raising=False)
    agent_module.project_redactor.cache_clear()
    yield
    agent_module.project_redactor.cache_clear()


def redacted(name: str, text: str) -> str:
    return Redactor(name).text(text)


@pytest.mark.parametrize(
    "text",
    [
        "write to ada.lovelace+notes@example.co.uk today",
        "ADA@EXAMPLE.ORG",
        "<ada_l@mail-host.example.com>",
        "ada@xn--bcher-kva.example",
    ],
)
def test_email_addresses_are_replaced(text: str) -> None:
    out = redacted("email", text)
    assert "@" not in out
    assert "[redacted:email]" in out


@pytest.mark.parametrize(
    "text",
    ["a@b", "root@localhost", "user@exa_mple.com", "an @ sign", "@handle", "x@-bad.com"],
)
def test_what_is_not_an_address_stays(text: str) -> None:
    assert redacted("email", text) == text


@pytest.mark.parametrize(
    "card",
    [
        "4111111111111111",  # Visa
        "4111 1111 1111 1111",
        "4111-1111-1111-1111",
        "5555555555554444",  # Mastercard
        "2223003122003222",  # Mastercard, 2-series
        "378282246310005",  # American Express, 15 digits
        "6011111111111117",  # Discover
    ],
)
def test_card_numbers_that_pass_luhn_are_replaced(card: str) -> None:
    assert redacted("card", f"card {card}, thanks") == "card [redacted:card], thanks"


@pytest.mark.parametrize(
    "text",
    [
        "4111111111111112",  # one digit off: fails Luhn
        "order 4111 1111 1111 1112",
        "1733540000000",  # a timestamp in milliseconds: no card starts with 1
        "id 41111111111111111111111",  # 23 digits: longer than any card
        "411111111111",  # 12 digits: shorter than any card
        "+1 415 555 0100",  # a phone number
        "2026-12-07",
    ],
)
def test_card_like_numbers_that_are_not_cards_stay(text: str) -> None:
    assert redacted("card", text) == text


def test_luhn() -> None:
    assert luhn("79927398713")
    assert not luhn("79927398710")


@pytest.mark.parametrize(
    "key",
    [
        "sk-proj-" + "a1B2" * 10,
        "sk-ant-api03-" + "x" * 40,
        "sk_live_" + "4eC39HqLyjWDarjtT1zdp7dc",
        "ghp_" + "A" * 36,
        "github_pat_" + "B" * 40,
        "AKIAIOSFODNN7EXAMPLE",
        "AIza" + "S" * 35,
        "xoxb-1234567890-abcdefghij",
        "hf_" + "c" * 34,
        "glpat-" + "d" * 20,
    ],
)
def test_api_keys_of_known_shapes_are_replaced(key: str) -> None:
    assert redacted("api_key", f"key={key};") == "key=[redacted:api_key];"


@pytest.mark.parametrize(
    "text",
    [
        "sk-short",
        "task-abcdefghijklmnopqrstuvwxyz",  # sk- inside a word
        "risk-abcdefghijklmnopqrstuvwxyz",
        "AKIA-not-a-key",
        "ghp_tooshort",
    ],
)
def test_what_only_looks_like_a_key_stays(text: str) -> None:
    assert redacted("api_key", text) == text


def test_a_bearer_token_is_replaced_and_the_scheme_kept() -> None:
    header = "Authorization: Bearer eyJhbGciOiJIUzI1NiJ9.e30.abc-def_ghi"
    assert redacted("bearer", header) == "Authorization: Bearer [redacted:bearer]"
    assert redacted("bearer", "bearer 0123456789abcdef==") == "bearer [redacted:bearer]"
    assert redacted("bearer", "Bearer " + "Q" * 24) == "Bearer [redacted:bearer]"


@pytest.mark.parametrize("text", ["the bearer instruments", "Bearer abc", "Bearer realm"])
def test_words_after_bearer_stay(text: str) -> None:
    assert redacted("bearer", text) == text


def test_a_long_string_costs_one_pass() -> None:
    everything = Redactor(*BUILTINS)
    hostile = [
        "a@" + "a." * 50_000 + "1",
        "Bearer " + "a" * 100_000,
        "4 " * 100_000,
        ("x" * 30 + "@") * 5_000,
    ]
    began = time.process_time()
    for text in hostile:
        everything.text(text)
    assert time.process_time() - began < 5  # quadratic would take minutes


def test_values_are_walked_and_never_changed() -> None:
    value = {
        "to": "ada@example.com",
        "cc": ["bob@example.com", {"note": "card 4111111111111111"}],
        "bob@example.com": 3,
        "count": 3,
        "pair": ("carol@example.com", None),
        "ok": True,
    }
    before = copy.deepcopy(value)
    out = Redactor("email", "card").redact(value)
    assert value == before
    assert out == {
        "to": "[redacted:email]",
        "cc": ["[redacted:email]", {"note": "card [redacted:card]"}],
        "[redacted:email]": 3,
        "count": 3,
        "pair": ["[redacted:email]", None],
        "ok": True,
    }
    assert Redactor().redact(value) is value  # nothing to take out


def test_own_regexes_names_and_functions() -> None:
    redactor = Redactor(
        re.compile(r"ACME-\d+"),
        lambda text: text.replace("Ada", "A."),
        patterns={"employee": r"E\d{6}"},
    )
    assert (
        redactor.text("Ada has ACME-42 and E123456") == "A. has [redacted] and [redacted:employee]"
    )
    assert Redactor.of(redactor) is redactor
    assert Redactor.of("email").names == ("email",)
    assert Redactor.of(None).text("ada@example.com") == "ada@example.com"


def test_a_function_that_fails_takes_the_whole_string() -> None:
    def broken(text: str) -> str:
        raise RuntimeError(text)

    assert Redactor(broken).text("ada@example.com") == "[redacted]"
    assert Redactor(lambda text: None).redact(["x"]) == ["[redacted]"]  # type: ignore[arg-type,return-value]


@pytest.mark.parametrize(
    ("spec", "words"),
    [
        (["emial"], "no built-in redaction pattern named 'emial'"),
        ("phone", "no built-in redaction pattern named 'phone'"),
        ([42], "redact takes built-in pattern names"),
        (3.5, "redact takes built-in pattern names"),
        ({"email": True}, "redact takes built-in pattern names"),
        ([re.compile(rb"x")], "a redaction regex must match text, not bytes"),
    ],
)
def test_bad_redact_is_one_clear_error_and_no_agent(spec: object, words: str) -> None:
    name = unique("redact-bad")
    with pytest.raises(InvalidInput, match=re.escape(f"agent {name!r}: {words}")):
        Agent(name=name, model="scripted/x", redact=spec)  # type: ignore[arg-type]
    assert name not in agent_module.registry.names()


def test_a_pattern_that_does_not_compile_is_one_clear_error() -> None:
    with pytest.raises(InvalidInput, match="'order' does not compile"):
        Redactor(patterns={"order": "ORD-(\\d+"})
    with pytest.raises(InvalidInput, match="name is lowercase"):
        Redactor(patterns={"Order Id": r"\d+"})


def test_an_agent_adds_its_own_to_the_projects(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("RUNWRIGHT_REDACT", "api_key")
    agent = Agent(name=unique("redact"), model="scripted/x", redact=["email"], register=False)
    plain = Agent(name=unique("redact"), model="scripted/x", register=False)
    # A process that does not know the agent uses the project's.
    assert agent_module.registry.redactor(unique("unknown")).names == ("api_key",)
    monkeypatch.delenv("RUNWRIGHT_REDACT")
    agent_module.project_redactor.cache_clear()
    assert agent.redactor.names == ("api_key", "email")
    assert plain.redactor.names == ("api_key",)
    assert agent_module.registry.redactor(unique("unknown")).names == ()


def test_the_setting_names_built_ins_only() -> None:
    assert Settings.from_env({"RUNWRIGHT_REDACT": "email, card"}).redact == ("email", "card")
    with pytest.raises(ConfigurationError, match=r"RUNWRIGHT_REDACT: no built-in .* 'phone'"):
        Settings.from_env({"RUNWRIGHT_REDACT": "email,phone"})


def _record(agent: str | None, message: str, **fields: object) -> logging.LogRecord:
    record = logging.LogRecord("tests.redaction", logging.INFO, __file__, 1, message, (), None)
    record.agent = agent
    setattr(record, LINE_FIELDS, fields)
    return record


def test_the_log_formats_redact_with_the_records_agent() -> None:
    agent = Agent(name=unique("redact-logs"), model="scripted/x", redact=["email"])
    record = _record(agent.name, "mailed ada@example.com", to="ada@example.com")
    try:
        raise ValueError("no mailbox ada@example.com")
    except ValueError:
        import sys

        record.exc_info = sys.exc_info()
    line = JsonFormatter().format(record)
    assert "ada@example.com" not in line
    entry = json.loads(line)
    assert entry["message"] == "mailed [redacted:email]"
    assert entry["to"] == "[redacted:email]"
    assert "no mailbox [redacted:email]" in entry["exception"]
    text = TextFormatter("%(message)s").format(record)
    assert "ada@example.com" not in text and "[redacted:email]" in text
    # Another agent's line, or one outside a run, keeps it (no project default here).
    assert "ada@example.com" in JsonFormatter().format(_record(None, "ada@example.com"))


def test_the_public_shape_of_an_event_is_redacted() -> None:
    event = RunEvent(
        "run-1",
        EventType.STEP,
        {
            "kind": "llm",
            "index": 0,
            "output": {
                "message": {"content": "Mailed ada@example.com", "tool_calls": []},
                "finish_reason": "stop",
            },
            "error": None,
        },
        id=1,
    )
    shown = public_event(event, Redactor("email"))
    assert shown["data"]["output"]["message"]["content"] == "Mailed [redacted:email]"
    assert event.data["output"]["message"]["content"] == "Mailed ada@example.com"
    assert "ada@example.com" in json.dumps(public_event(event))  # no project default here


def test_error_texts_on_spans_are_redacted_without_content_capture() -> None:
    agent = Agent(name=unique("redact-spans"), model="scripted/x", redact=["email"])
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    observer = OtelObserver(Settings(otel=True), tracer_provider=provider)
    now = utcnow()
    run = Run("run-1", agent.name, RunStatus.RUNNING, TriggerEnvelope(), Usage(), now, now)
    call = ToolCall("send_mail", "call-1", 0, error="no mailbox ada@example.com")
    with observer.tool_call(run, call):
        pass
    with pytest.raises(ValueError), observer.model_call(run, ModelCall("scripted/x", 0)):
        raise ValueError("refused ada@example.com")
    provider.shutdown()
    tool_span, model_span = exporter.get_finished_spans()
    assert tool_span.status.description == "no mailbox [redacted:email]"
    assert model_span.status.description == "ValueError: refused [redacted:email]"
    [raised] = [dict(e.attributes or {}) for e in model_span.events if e.name == "exception"]
    assert raised["exception.message"] == "refused [redacted:email]"
    assert "ada@example.com" not in str(raised["exception.stacktrace"])
