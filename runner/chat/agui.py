"""A thread's runs as AG-UI's event stream (docs/conversations.md).

The same parts as the UI message stream (runner/chat/uistream.py), from the
same events, each as one AG-UI event (``data: {json}``), with the same SSE
ids: a run is ``RUN_STARTED`` ... ``RUN_FINISHED`` (``RUN_ERROR`` when it
failed); its text ``TEXT_MESSAGE_START``, ``TEXT_MESSAGE_CONTENT``,
``TEXT_MESSAGE_END``; each tool call one ``TOOL_CALL_CHUNK`` with its
arguments whole (the client opens and closes the call); its result
``TOOL_CALL_RESULT``; an approval or a question a ``CUSTOM`` event named
``approval`` or ``question``. Steps are not events of their own.
"""

from __future__ import annotations

import json
from typing import Any

from runner.sse import HEADERS as SSE_HEADERS
from store.models import RunStatus

HEADERS = dict(SSE_HEADERS)


def agui_event(part: dict[str, Any], run_id: str, thread: str) -> dict[str, Any] | None:
    """The AG-UI event of a UI message part, or None (a step's bounds)."""
    kind = part["type"]
    if kind == "start":
        return {"type": "RUN_STARTED", "threadId": thread, "runId": run_id}
    if kind == "text-start":
        return {"type": "TEXT_MESSAGE_START", "messageId": _text(run_id, part), "role": "assistant"}
    if kind == "text-delta":
        return {
            "type": "TEXT_MESSAGE_CONTENT",
            "messageId": _text(run_id, part),
            "delta": part["delta"],
        }
    if kind == "text-end":
        return {"type": "TEXT_MESSAGE_END", "messageId": _text(run_id, part)}
    if kind == "tool-input-available":
        return {
            "type": "TOOL_CALL_CHUNK",
            "toolCallId": part["toolCallId"],
            "toolCallName": part["toolName"],
            "delta": json.dumps(part["input"]),
        }
    if kind in ("tool-output-available", "tool-output-error"):
        output = part.get("output") if kind == "tool-output-available" else part["errorText"]
        return {
            "type": "TOOL_CALL_RESULT",
            "messageId": f"{run_id}:result:{part['toolCallId']}",
            "toolCallId": part["toolCallId"],
            "content": output if isinstance(output, str) else json.dumps(output),
            "role": "tool",
        }
    if kind in ("data-approval", "data-question"):
        return {"type": "CUSTOM", "name": kind.removeprefix("data-"), "value": part["data"]}
    if kind == "finish":
        metadata = part["messageMetadata"]
        if metadata["status"] == RunStatus.FAILED.value:
            error = {"type": "RUN_ERROR", "message": "the run failed"}
            if metadata.get("error_code"):
                error["code"] = metadata["error_code"]
            return error
        return {"type": "RUN_FINISHED", "threadId": thread, "runId": run_id, "result": metadata}
    return None


def _text(run_id: str, part: dict[str, Any]) -> str:
    # AG-UI's text messages are messages of their own: unique in the thread.
    return f"{run_id}:{part['id']}"
