"""The console's one stylesheet and one script, and the headers of its pages.

Both are constants, inlined in every page and named in the CSP by hash, so a
page runs exactly this script and nothing else: no ``'unsafe-inline'``, no
files to serve or to package. The script reads what it needs from ``data-``
attributes the server wrote, and puts everything that came from a run into
the page through ``textContent``: model and tool output stay text.
"""

from __future__ import annotations

import base64
import hashlib

STYLE = """
body{font:14px/1.45 system-ui,sans-serif;margin:0;color:#1d2125;background:#fafafa}
header.top{display:flex;gap:1.2rem;align-items:center;padding:.6rem 1.2rem;background:#1d2a3a}
header.top a,header.top span{color:#fff;text-decoration:none}
header.top .user{margin-left:auto;opacity:.8}
header.top form{margin:0}
header.top button{background:none;color:#fff;border:1px solid #8a9bb0;padding:.1rem .6rem}
main{max-width:72rem;margin:1rem auto;padding:0 1.2rem}
h1{font-size:1.4rem;margin:.6rem 0}h2{font-size:1.1rem;margin:1.4rem 0 .5rem}
h3{font-size:.95rem;margin:.8rem 0 .3rem}
table{border-collapse:collapse;width:100%;background:#fff}
th,td{text-align:left;padding:.3rem .5rem;border-bottom:1px solid #e3e6ea;vertical-align:top}
td.num,th.num{text-align:right;font-variant-numeric:tabular-nums}
pre{background:#f2f4f7;padding:.5rem;margin:.3rem 0;overflow:auto;max-height:30rem;
white-space:pre-wrap;overflow-wrap:anywhere}
pre.text{background:#fff;border-left:3px solid #8a9bb0}
details>summary{cursor:pointer;color:#34577e;overflow-wrap:anywhere}
.st{display:inline-block;padding:0 .45rem;border-radius:.6rem;background:#dde3ea;font-size:.85em}
.st-completed{background:#cdebd3}.st-failed{background:#f5c9c9}.st-waiting{background:#fbe7b5}
.st-running{background:#cfe1fb}.st-cancelled,.st-interrupted{background:#e6e0f0}
.st-attention{background:#f7b267}.st-parked{background:#f3e3c3}
.note{background:#e8f3ea;border:1px solid #b9dcc1;padding:.5rem .8rem}
.problem{background:#fbeaea;border:1px solid #e8b5b5;padding:.5rem .8rem}
dl.facts{display:grid;grid-template-columns:max-content 1fr;gap:.15rem 1rem;margin:0}
dl.facts dt{color:#5b6670}dl.facts dd{margin:0;overflow-wrap:anywhere}
form.filters{display:flex;flex-wrap:wrap;gap:.6rem;align-items:end;margin:.5rem 0}
form.filters label{display:flex;flex-direction:column;font-size:.85em;color:#5b6670}
.counts a{margin-right:.8rem}
.actions{display:flex;gap:.6rem;margin:.6rem 0}
ol.timeline{list-style:none;padding:0;margin:0}
li.ev{background:#fff;border:1px solid #e3e6ea;border-radius:.3rem;padding:.4rem .6rem;
margin:.3rem 0}
li.kind-status,li.kind-execution,li.kind-approval,li.kind-child,li.kind-version{background:transparent;border-style:dashed}
.head{display:flex;flex-wrap:wrap;gap:.5rem;align-items:baseline}
.idx{font-weight:600;color:#5b6670}.meta{color:#5b6670;font-size:.85em}
.call{margin:.3rem 0 .3rem 1rem}
article.ask{background:#fff;border:1px solid #d5dae0;border-radius:.4rem;padding:.6rem 1rem;
margin:1rem 0}
section.approval{border-top:1px solid #e3e6ea;padding-top:.5rem;margin-top:.6rem}
textarea{width:100%;max-width:40rem;min-height:2.5rem;font:inherit}
button{font:inherit;padding:.25rem .8rem;cursor:pointer}
button.approve{background:#2f7d46;color:#fff;border:1px solid #25663a}
button.deny{background:#a33a3a;color:#fff;border:1px solid #8a2f2f}
.expires{color:#8a5a00}
button.answer{background:#34577e;color:#fff;border:1px solid #2a4766}
textarea.json{font-family:ui-monospace,monospace;font-size:.9em;min-height:6rem}
.invalid{color:#a33a3a;font-weight:600;margin:.2rem 0}
label.check{display:block;margin:.5rem 0 0}
label.field{display:block;margin:.4rem 0}
details.edit{margin:.4rem 0}
table.standing{margin-bottom:.3rem}
td.mark{text-align:center;white-space:nowrap}td.pass{color:#25663a}
td.fail{color:#a33a3a;font-weight:600}
tr.changed>td:first-child{border-left:3px solid #8a9bb0}
tr.better>td:first-child{border-left-color:#2f7d46}tr.worse>td:first-child{border-left-color:#a33a3a}
td.better,span.better{background:#cdebd3}td.worse,span.worse{background:#f5c9c9}
details.report{min-width:16rem}td.payload{max-width:24rem}
"""

SCRIPT = """
"use strict";

// Why a box of JSON (edited arguments, an answer) would be refused, or "".
// The server checks it again, and the engine checks it against its schema.
function jsonProblem(box) {
  let value;
  try {
    value = JSON.parse(box.value);
  } catch (error) {
    return "This is not JSON: " + error.message;
  }
  const object = value !== null && typeof value === "object" && !Array.isArray(value);
  if (box.dataset.json === "object" && !object) return "This must be a JSON object: { ... }.";
  return "";
}

// Every box of JSON in the form is checked before it is sent: a bad one
// stops the submit and says why beside it, and nothing reaches the server.
function jsonChecked(form) {
  let good = true;
  for (const box of form.querySelectorAll("textarea[data-json]")) {
    const problem = jsonProblem(box);
    const shown = document.getElementById(box.getAttribute("aria-describedby"));
    if (shown) {
      shown.textContent = problem;
      shown.hidden = !problem;
    }
    box.setAttribute("aria-invalid", problem ? "true" : "false");
    if (problem && good) {
      const folded = box.closest("details");
      if (folded) folded.open = true;
      box.focus();
    }
    if (problem) good = false;
  }
  return good;
}

for (const box of document.querySelectorAll("textarea[data-json]")) {
  box.addEventListener("input", () => {
    box.setAttribute("aria-invalid", "false");
    const shown = document.getElementById(box.getAttribute("aria-describedby"));
    if (shown) shown.hidden = true;
  });
}

// A form decides once: a second submit (a double click) is dropped here, and
// the server answers a second POST "already decided" in any case. A form
// stopped for its JSON is not sent, so it may be sent once corrected.
for (const form of document.querySelectorAll("form.once")) {
  form.addEventListener("submit", (event) => {
    if (!jsonChecked(form) || form.dataset.sent) {
      event.preventDefault();
      return;
    }
    form.dataset.sent = "1";
  });
}

function span(ms) {
  const minutes = Math.floor(ms / 60000);
  if (minutes < 1) return Math.ceil(ms / 1000) + " s";
  if (minutes < 120) return minutes + " min";
  const hours = Math.floor(minutes / 60);
  return hours < 48 ? hours + " h " + (minutes % 60) + " min" : Math.floor(hours / 24) + " days";
}

function countdown() {
  const now = Date.now();
  for (const item of document.querySelectorAll("[data-expires]")) {
    const at = Date.parse(item.dataset.expires);
    if (Number.isNaN(at)) continue;
    item.textContent = at > now ? "expires in " + span(at - now) : "expired";
  }
}
countdown();
setInterval(countdown, 1000);

function el(tag, cls, text) {
  const node = document.createElement(tag);
  if (cls) node.className = cls;
  if (text !== undefined && text !== null) node.textContent = String(text);
  return node;
}

// JSON pretty-printed, in a <details> when long (as the server renders it).
function block(value, label) {
  const text = typeof value === "string" ? value : JSON.stringify(value, null, 2) ?? "null";
  const pre = el("pre", "json", text);
  if (text.length <= 400 && text.split("\\n").length <= 12) return pre;
  const details = el("details");
  details.append(el("summary", "", (label ? label + ": " : "") + text.length + " characters"), pre);
  return details;
}

function parsed(raw) {
  if (typeof raw !== "string") return raw;
  try { return JSON.parse(raw); } catch { return raw; }
}

function head(li, index, title, name, meta) {
  const line = el("div", "head");
  if (index !== null) line.append(el("span", "idx", index));
  line.append(el("b", "", title));
  if (name) line.append(el("span", "name", name));
  if (meta) line.append(el("span", "meta", meta));
  li.append(line);
}

function stepItem(li, d) {
  const ms = d.finished_at ? Date.parse(d.finished_at) - Date.parse(d.started_at) : null;
  const took = ms === null || Number.isNaN(ms) ? "" : ms + " ms";
  if (d.kind === "llm") {
    const message = (d.output && d.output.message) || {};
    const usage =
      d.input_tokens === null
        ? ""
        : d.input_tokens + " in, " + d.output_tokens + " out" +
          (d.usage_estimated ? " (estimated)" : "") + ", ";
    head(li, d.index, "model", d.name, usage + took);
    if (typeof message.content === "string" && message.content) {
      li.append(el("pre", "text", message.content));
    }
    for (const call of Array.isArray(message.tool_calls) ? message.tool_calls : []) {
      const fn = (call && call.function) || {};
      const box = el("div", "call");
      box.append(el("b", "", "calls " + fn.name), block(parsed(fn.arguments), "arguments"));
      li.append(box);
    }
  } else if (d.kind === "tool") {
    head(li, d.index, "tool", d.name, took + (d.error ? ", failed" : ""));
    li.append(el("div", "meta", "arguments"), block(d.input, "arguments"));
    const outcome = d.error ? "error" : "result";
    li.append(el("div", "meta", outcome), block(d.error || d.output, outcome));
  } else if (d.kind === "wait") {
    head(li, d.index, WAITS[d.name] || "waits for approval", null, null);
  } else {
    head(li, d.index, d.kind, d.name, took);
    li.append(block(d.output, d.kind));
  }
  if (d.error && d.kind !== "tool") li.append(block(d.error, "error"));
}

// What a wait step's name says it waits for (timeline.py's _WAITS).
const WAITS = { children: "waits for its children", input: "waits for a person's answer" };

// Who decided, and how beyond yes or no (timeline.py's decided_how).
function decidedHow(d) {
  let said;
  if (d.standing_from) {
    said = "by a standing approval" + (d.decided_by ? " from " + d.decided_by : "");
  } else if (d.decided_by) {
    said = "by " + d.decided_by + (d.edited ? " with edited arguments" : "");
  } else {
    said = d.edited ? "with edited arguments" : "";
  }
  if (d.for_run) said += (said ? ", " : "") + "approved for the rest of the run";
  return said;
}

// An approval or a question, requested or decided (timeline.py's _approval_event).
function approvalItem(li, d) {
  const question = d.kind === "input";
  const noun = question ? "question" : "approval";
  const name = question ? null : d.tool_name;
  const input = question && d.input ? d.input : {};
  const asked = typeof input.question === "string" ? input.question : null;
  const said = () => {
    if (asked !== null) li.append(el("div", "meta", "question"), el("pre", "text", asked));
  };
  if (d.expired) {
    // Marked by the server (runner/core/approvals/expiry.py), as the page renders it.
    head(li, d.step_index, noun + " expired", name, "at " + d.expired_at + " with no decision");
    said();
    return;
  }
  if (d.action === "requested") {
    head(li, d.step_index, question ? "question asked" : "approval requested", name, null);
    said();
    return;
  }
  const meta = [decidedHow(d), d.reason ? "reason: " + d.reason : ""];
  const how = meta.filter((part) => part).join(" \u00b7 ");
  head(li, d.step_index, noun + " " + d.decision, name, how);
  if (question && d.decision === "answered") {
    said();
    const answer =
      typeof d.answer === "string" ? el("pre", "text", d.answer) : block(d.answer, "answer");
    li.append(el("div", "meta", "answer"), answer);
  }
  if (d.edited === true) {
    li.append(el("div", "meta", "the model asked for"), block(d.input, "arguments"));
    const who = (d.decided_by || "a person") + " approved";
    li.append(el("div", "meta", who), block(d.arguments, "arguments"));
  }
}

// A move to another version of the agent (timeline.py's _version_event).
function versionItem(li, d) {
  const who = d.by ? "by " + d.by : "on resuming";
  head(li, null, "version " + d.from + " \u2192 " + d.to, null, who);
  const list = el("ul", "changes");
  const given = Array.isArray(d.changes) && d.changes.length;
  const changes = given ? d.changes : ["no change of behaviour"];
  for (const change of changes) list.append(el("li", null, String(change)));
  li.append(list);
}

function item(event) {
  const d = event.data;
  const li = el("li", "ev kind-" + (event.type === "step" ? d.kind : event.type));
  if (event.type === "step") {
    stepItem(li, d);
  } else if (event.type === "status") {
    head(li, null, "status " + d.status, d.error_code || null, null);
  } else if (event.type === "execution") {
    const takeover = d.takeover ? "takes over a stopped execution" : null;
    head(li, null, "execution " + d.epoch, takeover, d.owner);
  } else if (event.type === "child") {
    const code = d.error_code ? " (" + d.error_code + ")" : "";
    const title = d.action === "started"
      ? "child " + d.run_id + " started for call " + d.call_id
      : "child " + d.run_id + " " + d.status + code;
    head(li, null, title, d.agent || null, null);
  } else if (event.type === "approval") {
    approvalItem(li, d);
  } else if (event.type === "version") {
    versionItem(li, d);
  }
  return li;
}

const ENDED = ["completed", "failed", "cancelled"];

function showStatus(status) {
  const badge = document.getElementById("status");
  if (badge) {
    badge.textContent = status;
    badge.className = "st st-" + status;
  }
  const cancel = document.getElementById("cancel");
  const retry = document.getElementById("retry");
  if (cancel) cancel.hidden = ENDED.includes(status);
  if (retry) retry.hidden = !(status === "failed" || status === "cancelled");
}

function compare(a, b) {
  for (let i = 0; i < a.length; i += 1) if (a[i] !== b[i]) return a[i] < b[i] ? -1 : 1;
  return 0;
}

// The model's text while it streams: one item at the end of the timeline,
// gone when the step it belongs to is journaled. A delta belongs to the text
// of (epoch, step, attempt): a newer one starts the text again (a retry, or
// another worker taking over), an older one is late and dropped.
class Streaming {
  constructor(timeline, journaled) {
    this.timeline = timeline;
    this.journaled = journaled;
    this.key = null;
    this.item = null;
  }
  delta(d) {
    if (!d || !Number.isInteger(d.step) || !Number.isInteger(d.n)) return;
    if (typeof d.text !== "string" || d.step <= this.journaled) return;
    const key = [d.epoch, d.step, d.attempt];
    if (this.key !== null && compare(key, this.key) < 0) return;
    if (this.key === null || compare(key, this.key) > 0) {
      this.drop();
      this.key = key;
      this.text = "";
      this.next = 0;
      this.early = new Map();
      this.item = el("li", "ev kind-streaming");
      head(this.item, d.step, "model", null, "writing\u2026");
      this.pre = el("pre", "text", "");
      this.item.append(this.pre);
      this.timeline.append(this.item);
    }
    this.early.set(d.n, d.text);
    while (this.early.has(this.next)) {
      this.text += this.early.get(this.next);
      this.early.delete(this.next);
      this.next += 1;
    }
    this.pre.textContent = this.text;
  }
  journal(d) {
    if (d.kind !== "llm") return;
    this.journaled = Math.max(this.journaled, d.index);
    if (this.key !== null && d.index >= this.key[1]) this.drop();
  }
  drop() {
    if (this.item) this.item.remove();
    this.item = null;
    this.key = null;
  }
  add(node) {
    this.timeline.insertBefore(node, this.item);
  }
}

const timeline = document.getElementById("timeline");
if (timeline && timeline.dataset.events) {
  let last = Number(timeline.dataset.after || "0");
  const streaming = new Streaming(timeline, Number(timeline.dataset.journaled || "0"));
  const source = new EventSource(timeline.dataset.events + "?after=" + last);
  for (const type of ["status", "step", "approval", "execution", "child", "version"]) {
    source.addEventListener(type, (message) => {
      const event = JSON.parse(message.data);
      if (event.id !== null && event.id <= last) return;
      if (event.id !== null) last = event.id;
      if (event.type === "step") streaming.journal(event.data);
      streaming.add(item(event));
      if (event.type === "status") showStatus(event.data.status);
      if (event.type === "status" && ENDED.includes(event.data.status)) streaming.drop();
    });
  }
  source.addEventListener("token", (message) => streaming.delta(JSON.parse(message.data).data));
  source.addEventListener("end", (message) => {
    if (JSON.parse(message.data).reason !== "timeout") source.close();
  });
}
"""


def _hash(text: str) -> str:
    return "'sha256-" + base64.b64encode(hashlib.sha256(text.encode()).digest()).decode() + "'"


CSP = (
    f"default-src 'none'; script-src {_hash(SCRIPT)}; style-src {_hash(STYLE)}; "
    "connect-src 'self'; form-action 'self'; base-uri 'none'; frame-ancestors 'none'"
)

# Every page: the CSP above; no referrer (an approval link's token is in its
# URL); no caching (pages show tool input, and a decided approval must not
# come back from a cache as pending).
PAGE_HEADERS = {
    "Content-Security-Policy": CSP,
    "X-Content-Type-Options": "nosniff",
    "Referrer-Policy": "no-referrer",
    "X-Frame-Options": "DENY",
    "Cache-Control": "no-store",
}
