"""The chat stream's Django view (runner/chat/django.py) under the console's
permissions: ``view_run`` and ``view_payloads``, else a 403."""

from __future__ import annotations

import json
from collections.abc import Iterator

import pytest

from runner import Agent, Engine, RunStatus, set_default_engine
from runner.testing import ScriptedModel, text
from tests.console.django_support import client_of, delete_users, make_user
from tests.console.django_support import text as body_of
from tests.helpers import unique

ANSWER = "Order A-7 has shipped."


@pytest.fixture
def chat(django_db: None, engine: Engine) -> Iterator[Engine]:
    from django.test import override_settings

    set_default_engine(engine)
    try:
        with override_settings(ROOT_URLCONF="tests.console.chat_urls"):
            yield engine
    finally:
        set_default_engine(None)
        delete_users()


def test_the_view_streams_a_thread_to_those_who_may_see_payloads(chat: Engine) -> None:
    name, thread = unique("chat-django"), unique("thread")
    Agent(name=name, model=ScriptedModel(name, [text(ANSWER)]).model)
    run = chat.start(name, {"question": "Where is A-7?"}, thread=thread)
    done = chat.execute(run.id)
    assert done is not None and done.status is RunStatus.COMPLETED
    path = f"/chat/threads/{thread}/stream"

    reader = make_user(staff=False, permissions=("view_run", "view_payloads"))
    response = client_of(reader).get(path)
    assert response.status_code == 200
    assert response["x-vercel-ai-ui-message-stream"] == "v1"
    frames = body_of(response).split("\n\n")
    parts = [json.loads(f.split("data: ", 1)[1]) for f in frames if "data: {" in f]
    assert parts[0] == {"type": "start", "messageId": run.id}
    assert [p["delta"] for p in parts if p["type"] == "text-delta"] == [ANSWER]
    assert parts[-1]["type"] == "finish" and frames[-2] == "data: [DONE]"

    for refused in (make_user(permissions=("view_run",)), None):
        response = client_of(refused).get(path)
        assert response.status_code == 403 and ANSWER not in body_of(response)
    assert client_of(reader).get(f"/chat/threads/{unique('none')}/stream").status_code == 204
    # AG-UI's event stream, from the same events, under the same rules.
    response = client_of(reader).get(f"/chat/threads/{thread}/agui")
    assert response.status_code == 200
    events = [json.loads(f.split("data: ", 1)[1]) for f in body_of(response).split("\n\n") if f]
    assert events[0] == {"type": "RUN_STARTED", "threadId": thread, "runId": run.id}
    assert [e["delta"] for e in events if e["type"] == "TEXT_MESSAGE_CONTENT"] == [ANSWER]
    assert events[-1]["type"] == "RUN_FINISHED"
    refused = client_of(make_user(permissions=("view_run",))).get(f"/chat/threads/{thread}/agui")
    assert refused.status_code == 403
