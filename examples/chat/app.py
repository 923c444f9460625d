"""A chat page on Runwright (docs/conversations.md): a thread per browser
session, each message sent with ``runner.send``, the thread's runs read back
as the Vercel AI SDK's UI message stream (``runner.chat.flask``), and a
refund approved by the user in the chat (``Engine.decide_in_thread``).

The page reads the stream with the browser's ``EventSource`` and a few lines
of script, to show the protocol bare; a React page would hand the same URL
to ``useChat``'s transport. Start it, a worker and the local stack with one
command: ``python -m examples.chat`` (see ``__main__``).
"""

from __future__ import annotations

import secrets
from typing import Any

from flask import Flask, jsonify, request, session

from examples.chat.agent import AGENT
from runner import Engine, RunwrightError, ThreadBusy
from runner.chat.flask import chat_blueprint


def create_app(engine: Engine) -> Flask:
    app = Flask(__name__)
    app.secret_key = secrets.token_hex(32)

    def user() -> str:
        """The signed-in user: here, one per browser session."""
        if "user" not in session:
            session["user"] = f"guest-{secrets.token_hex(4)}"
        return str(session["user"])

    def thread() -> str:
        return f"chat-{user()}"

    # The stream answers the session's user only, and only for their thread.
    def guard(req: Any) -> str | None:
        name = session.get("user")
        wanted = req.view_args.get("thread") if req.view_args else None
        return name if name and wanted == f"chat-{name}" else None

    app.register_blueprint(chat_blueprint(engine, guard=guard), url_prefix="/chat")

    @app.get("/")
    def page() -> str:
        return PAGE.replace("{{thread}}", thread())

    @app.post("/api/messages")
    def send() -> Any:
        body = request.get_json(silent=True) or {}
        try:
            run = engine.send(thread(), str(body.get("text", "")), agent=AGENT, by=user())
        except ThreadBusy as exc:
            return jsonify(error=exc.message), 409
        except RunwrightError as exc:
            return jsonify(error=exc.message), 400
        return jsonify(run=run.id), 202

    @app.post("/api/requests/<request_id>")
    def decide(request_id: str) -> Any:
        body = request.get_json(silent=True) or {}
        try:
            engine.decide_in_thread(
                thread(), request_id, approve=bool(body.get("approve")), by=user()
            )
        except RunwrightError as exc:
            return jsonify(error=exc.message), 409
        return jsonify(decided=True)

    return app


PAGE = """<!doctype html>
<html lang="en"><head><meta charset="utf-8"><title>Runwright chat</title>
<style>
body { font: 15px system-ui, sans-serif; max-width: 40rem; margin: 2rem auto; }
.msg { padding: .4rem .6rem; margin: .3rem 0; border-radius: .4rem; white-space: pre-wrap; }
.user { background: #e8f0fe; text-align: right; }
.assistant { background: #f1f3f4; }
.tool { color: #555; font-size: .9em; }
.ask { border: 1px solid #f0c36d; background: #fff8e1; }
form { display: flex; gap: .5rem; margin-top: 1rem; }
input { flex: 1; padding: .4rem; }
</style></head>
<body data-thread="{{thread}}">
<h1>Support chat</h1>
<div id="log"></div>
<form id="box"><input id="text" autocomplete="off" placeholder="Ask, or: refund A-1001">
<button id="send">Send</button></form>
<script>
const thread = document.body.dataset.thread;
const log = document.getElementById("log");
let last = null;
const texts = {};

function line(cls, text) {
  const div = document.createElement("div");
  div.className = "msg " + cls;
  div.textContent = text;
  log.appendChild(div);
  return div;
}

function ask(part) {
  const asked = part.data.tool_name + " " + JSON.stringify(part.data.input);
  const box = line("ask", "Approve " + asked + "?");
  box.id = "ask-" + part.id;
  if (part.data.status !== "pending") { box.append(" (" + part.data.status + ")"); return; }
  for (const [label, approve] of [["Approve", true], ["Deny", false]]) {
    const button = document.createElement("button");
    button.textContent = label;
    button.className = label.toLowerCase();
    button.onclick = async () => {
      await fetch("/api/requests/" + part.id, {method: "POST",
        headers: {"Content-Type": "application/json"}, body: JSON.stringify({approve})});
      box.querySelectorAll("button").forEach(b => b.remove());
      box.append(approve ? " (approved)" : " (denied)");
    };
    box.appendChild(button);
  }
}

function follow() {
  const url = "/chat/threads/" + encodeURIComponent(thread) + "/stream" +
    (last ? "?after=" + encodeURIComponent(last) : "");
  const source = new EventSource(url);
  source.onmessage = (event) => {
    if (event.lastEventId) last = event.lastEventId;
    if (event.data === "[DONE]") { source.close(); return; }
    const part = JSON.parse(event.data);
    const type = part.type;
    if (type === "text-start") texts[part.id] = line("assistant", "");
    else if (type === "text-delta") texts[part.id].textContent += part.delta;
    else if (type === "tool-input-available") {
      line("tool", "calls " + part.toolName + " " + JSON.stringify(part.input));
    } else if (type === "tool-output-available") {
      line("tool", "result " + JSON.stringify(part.output));
    } else if (type === "data-approval" && !document.getElementById("ask-" + part.id)) {
      ask(part);
    }
  };
  source.onerror = () => {};  // EventSource reconnects with Last-Event-ID by itself
}

document.getElementById("box").onsubmit = async (event) => {
  event.preventDefault();
  const input = document.getElementById("text");
  const text = input.value.trim();
  if (!text) return;
  input.value = "";
  line("user", text);
  const answer = await fetch("/api/messages", {method: "POST",
    headers: {"Content-Type": "application/json"}, body: JSON.stringify({text})});
  if (answer.ok) follow(); else line("tool", (await answer.json()).error);
};
</script></body></html>
"""
