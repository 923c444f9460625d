"""The console's pages, framework-neutral: a :class:`Request` in, a
:class:`Response` out. The Flask adapter (``runner.console.flask``) and a
Django one only translate; the rules are here, once:

- every page wants a user (the host app's, given in :attr:`Request.user`),
  except an approval link's page, which wants that approval's token instead;
- every POST wants :attr:`Request.csrf_ok`, checked before anything else;
- each page wants an ability of the user (runner/console/abilities.py):
  seeing runs for a page, deciding for a form's POST (a link's decision
  wants its token instead); without seeing payloads, the pages and the
  event stream mask them (runner/console/masking.py) and record no view;
- whatever the engine refuses is one clear answer (4xx, or 503 when the store
  is down), never a 500;
- approve, deny and answer are idempotent: a second POST answers "already
  decided" with a 409 and changes nothing;
- an edit or an answer the engine refuses (it checks them against the
  request's schema) is one 400 that says where it fails, and decides nothing.

The console is a client of the public engine API, never of the store.
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any
from urllib.parse import quote

from runner.console import answer_form, http_errors
from runner.console.abilities import EVERY_ABILITY, Ability
from runner.console.approval_pages import decided_text, inbox_body, link_body, link_title
from runner.console.assets import PAGE_HEADERS
from runner.console.evaluation_pages import (
    Payloads,
    case_payload,
    comparison_body,
    comparison_json,
    comparison_path,
    evaluation_body,
    evaluation_json,
    evaluations_body,
)
from runner.console.forms import parse_json
from runner.console.listing import runs_body
from runner.console.masking import (
    mask,
    masked_approval,
    masked_attempt,
    masked_effect,
    masked_evaluation,
    masked_event,
    masked_item,
    masked_run,
    masked_schedule,
)
from runner.console.render import message_page, page, sign_out_form, url
from runner.console.schedule_pages import schedule_body, schedules_body
from runner.console.thread_pages import masked_messages, thread_body, thread_json, threads_body
from runner.console.timeline import RETRYABLE, run_body
from runner.core.approvals.expiry import marked_event
from runner.core.errors import (
    ApprovalAlreadyDecided,
    DatasetNotFound,
    InvalidApprovalInput,
    InvalidInput,
    RunNotFound,
    RunwrightError,
    StoreUnavailable,
)
from runner.evals.compare import Comparison, compare
from runner.evals.evaluation import info_json
from runner.sse import HEADERS as SSE_HEADERS
from runner.sse import sse_stream
from store.events import EventType, RunEvent, step_event
from store.models import Approval, Evaluation, EvaluationInfo, Firing, RequestKind, Run
from store.rules import CancelAction

if TYPE_CHECKING:
    from runner.core.engine.conversations import Thread
    from runner.core.engine.engine import Engine

CSRF_FIELD = "csrf_token"
# A live stream ends after this long and the page's EventSource reconnects
# after the last event it saw: a waiting run does not hold a thread for days.
LIVE_TIMEOUT_SECONDS = 600.0
MAX_QUERY_CHARS = 200
MAX_PAGE = 1000

# What a redirect after a POST may say; the query names one, so nothing a
# client writes in the URL reaches the page.
NOTES = {
    "approved": "Approved.",
    "edited": "Approved with your edited arguments.",
    "for_run": "Approved for the rest of the run.",
    "denied": "Denied.",
    "run_failed": "Denied, and the run failed.",
    "answered": "Answered.",
    "cancel": "The run is cancelled.",
    "cancel_requested": "Cancel requested: the run stops within a second or so.",
    "retried": "The run is queued again from its checkpoint.",
    "resolved": "Recorded. The run needs no more attention for that effect.",
    "sent": "Sent.",
}


@dataclass(frozen=True)
class Request:
    """What a handler needs of an HTTP request, as an adapter found it.

    ``params``: the URL's path parameters; ``query`` and ``form``: the first
    value of each field; ``user``: who the host app says is signed in (None:
    nobody); ``csrf_ok``: the form carried this session's CSRF token;
    ``csrf_token``: that token, for the forms a page renders; ``remote``:
    the client's address (for the audit log); ``abilities``: what the user
    may do (an adapter that does not say: everything, as before roles)."""

    method: str
    params: Mapping[str, str] = field(default_factory=dict)
    query: Mapping[str, str] = field(default_factory=dict)
    form: Mapping[str, str] = field(default_factory=dict)
    user: str | None = None
    csrf_ok: bool = False
    csrf_token: str = ""
    headers: Mapping[str, str] = field(default_factory=dict)
    remote: str | None = None
    abilities: frozenset[Ability] = EVERY_ABILITY

    @property
    def payloads(self) -> bool:
        """The user may see what runs carry."""
        return Ability.SEE_PAYLOADS in self.abilities

    @property
    def decides(self) -> bool:
        return Ability.DECIDE in self.abilities

    @property
    def source(self) -> str:
        """Where the request came from, as the audit log names it."""
        return f"console {self.remote or 'unknown'}"


@dataclass
class Response:
    """``body``: HTML, or the frames of an event stream."""

    status: int
    body: str | Iterator[bytes] = ""
    headers: dict[str, str] = field(default_factory=dict)
    content_type: str = "text/html; charset=utf-8"


@dataclass(frozen=True)
class Route:
    """``rule``: the path under the console's base, with ``<name>`` parameters
    (the syntax of both Flask and Django's ``path()``). ``public``: reachable
    without a user (the handler asks for an approval token instead).
    ``needs``: the ability a signed-in user must have."""

    name: str
    method: str
    rule: str
    public: bool = False
    needs: Ability = Ability.SEE_RUNS


ROUTES = (
    Route("runs", "GET", "/"),
    Route("run", "GET", "/runs/<run_id>"),
    Route("events", "GET", "/runs/<run_id>/events"),
    Route("cancel", "POST", "/runs/<run_id>/cancel", needs=Ability.DECIDE),
    Route("retry", "POST", "/runs/<run_id>/retry", needs=Ability.DECIDE),
    Route("decide_step", "POST", "/runs/<run_id>/steps/<step>/decide", needs=Ability.DECIDE),
    Route(
        "resolve_effect",
        "POST",
        "/runs/<run_id>/effects/<call_id>/resolve",
        needs=Ability.DECIDE,
    ),
    Route("inbox", "GET", "/approvals"),
    Route("approval", "GET", "/approvals/<approval_id>", public=True),
    # Public for a link's token; a signed-in user's decision wants DECIDE (_decide).
    Route("decide", "POST", "/approvals/<approval_id>", public=True, needs=Ability.DECIDE),
    Route("schedules", "GET", "/schedules"),
    Route("schedule", "GET", "/schedules/<name>"),
    Route("threads", "GET", "/threads"),
    Route("thread", "GET", "/threads/<thread>"),
    Route("send", "POST", "/threads/<thread>", needs=Ability.DECIDE),
    Route("api_thread", "GET", "/api/threads/<thread>"),
    Route("api_send", "POST", "/api/threads/<thread>/messages", needs=Ability.DECIDE),
    Route("evaluations", "GET", "/evaluations"),
    Route("evaluation", "GET", "/evaluations/<evaluation_id>"),
    Route("comparison", "GET", "/evaluations/<evaluation_id>/compare/<against>"),
    Route("api_evaluations", "GET", "/api/evaluations"),
    Route("api_evaluation", "GET", "/api/evaluations/<evaluation_id>"),
    Route("api_comparison", "GET", "/api/evaluations/<evaluation_id>/compare/<against>"),
)
_ROUTES = {route.name: route for route in ROUTES}


class Console:
    """The console over ``engine`` (or a zero-argument factory of one, called
    on each request: ``runner.default_engine``), at ``base_url`` (the path the
    host mounts it at, without a trailing slash: ``"/console"``). ``sign_out``:
    where a signed-in user's pages post to sign out (a console that signs
    its users in itself: ``runner.console.standalone``); None shows no button."""

    def __init__(
        self,
        engine: Engine | Callable[[], Engine],
        *,
        base_url: str,
        live_timeout: float = LIVE_TIMEOUT_SECONDS,
        now: Callable[[], datetime] = lambda: datetime.now(UTC),
        sign_out: str | None = None,
    ) -> None:
        self._engine = engine
        self.sign_out = sign_out
        self.base = base_url.rstrip("/")
        self.live_timeout = live_timeout
        self.now = now

    @property
    def engine(self) -> Engine:
        made = self._engine
        return made() if callable(made) else made

    def handle(self, name: str, request: Request) -> Response:
        """Answer ``request`` with the route called ``name``."""
        route = _ROUTES.get(name)
        if route is None:
            return self.error(404, "Not found", "The console has no such page.", request)
        method = "GET" if request.method == "HEAD" else request.method
        if method != route.method:
            return self.error(405, "Method not allowed", f"Use {route.method}.", request)
        if not route.public and request.user is None:
            return self._forbidden(request)
        if method == "POST" and not request.csrf_ok:
            return self.error(403, "Not done", http_errors.CSRF_MESSAGE, request)
        if not route.public and route.needs not in request.abilities:
            return self._not_allowed(route.needs, request)
        handler: Callable[[Request], Response] = getattr(self, "_" + name)
        try:
            return handler(request)
        except RunwrightError as exc:
            status, title = http_errors.status_for(exc)
            return self.error(status, title, exc.message, request)

    # ----------------------------------------------------------- answers

    def _html(self, title: str, body: str, request: Request, status: int = 200) -> Response:
        base = self.base if request.user is not None else None
        html = page(title, body, base=base, user=request.user, sign_out=self._sign_out(request))
        return Response(status, html, dict(PAGE_HEADERS))

    def error(self, status: int, title: str, message: str, request: Request) -> Response:
        """A page that says why ``request`` was refused (or what became of it)."""
        base = self.base if request.user is not None else None
        sign_out = self._sign_out(request)
        body = message_page(title, message, base=base, user=request.user, sign_out=sign_out)
        return Response(status, body, dict(PAGE_HEADERS))

    def _sign_out(self, request: Request) -> str:
        if self.sign_out is None or request.user is None:
            return ""
        return sign_out_form(self.sign_out, CSRF_FIELD, request.csrf_token)

    def _forbidden(self, request: Request) -> Response:
        return self.error(403, "Forbidden", http_errors.FORBIDDEN_MESSAGE, request)

    def _not_allowed(self, ability: Ability, request: Request) -> Response:
        return self.error(403, "Forbidden", http_errors.NOT_ALLOWED[ability], request)

    def _redirect(self, path: str, note: str) -> Response:
        return Response(303, "", {"Location": url(self.base, path, {"note": note})})

    def _note(self, request: Request) -> str | None:
        return NOTES.get(request.query.get("note", ""))

    # ------------------------------------------------------------- runs

    def _runs(self, request: Request) -> Response:
        query = request.query
        filters = {
            key: _text(query, key)
            for key in ("status", "agent", "thread", "since", "until", "attention")
            if query.get(key)
        }
        limit = _limit(query.get("limit"))
        if query.get("limit"):
            filters["limit"] = str(limit)  # the next page keeps it
        engine = self.engine
        runs = engine.list_runs(
            status=filters.get("status") or None,
            agent=filters.get("agent"),
            thread=filters.get("thread"),
            limit=limit + 1,
            before=_text(query, "before") or None,
            since=_moment(filters.get("since"), "since"),
            until=_moment(filters.get("until"), "until"),
            needs_attention=bool(filters.get("attention")),
            payloads=False,  # the list shows none
        )
        counts = engine.run_counts(filters.get("agent"))
        body = runs_body(
            runs[:limit],
            counts,
            base=self.base,
            filters=filters,
            more=len(runs) > limit,
            note=self._note(request),
        )
        return self._html("Runs", body, request)

    def _run(self, request: Request) -> Response:
        engine = self.engine
        # The events first, then the run: the page's stream resumes after the
        # last event shown, so whatever the run did after this read reaches
        # the page, however new the run read below is. Read the other way
        # round, a run that ended in between showed its old status, with
        # the event that ended it already behind the stream's cursor.
        run_id = request.params["run_id"]
        events, live = self._replay(run_id)
        run = engine.get_run(run_id)
        approvals = engine.approvals(run.id)
        attempts = engine.attempts(run.id)
        unknown = engine.unknown_effects(run.id)
        if not request.payloads:
            events = [masked_event(ev) for ev in events]
            run = masked_run(run)
            approvals = [masked_approval(a) for a in approvals]
            attempts = [masked_attempt(a) for a in attempts]
            unknown = [masked_effect(u) for u in unknown]
        why = engine.explain(run)  # it quotes a failed model call's error
        note = self._note(request)
        moves = [ev for ev in events if ev.type is EventType.VERSION]
        named = [run.version, run.started_version]
        named += [str(ev.data.get(end)) for ev in moves for end in ("from", "to")]
        body = run_body(
            run,
            events,
            approvals,
            attempts,
            base=self.base,
            csrf=request.csrf_token,
            live=live,
            unknown=unknown,
            why=why,
            children=engine.children(run.id),
            standing=engine.standing_approvals(run.id),
            titles=engine.store.version_titles(run.agent, named),
            decide=request.decides,
        )
        if note:
            body = f'<p class="note">{note}</p>' + body
        if request.payloads:
            engine.viewed_payloads(run.id, by=request.user, source=request.source)
        return self._html(f"{run.agent} {run.id}", body, request)

    def _replay(self, run_id: str) -> tuple[list[RunEvent], bool]:
        """The run's events so far (False: the feed is down, so the steps
        alone, and no live updates)."""
        engine = self.engine
        try:
            return list(engine.events(run_id, timeout=0, tokens=False)), True
        except StoreUnavailable:
            return [step_event(step) for step in engine.steps(run_id)], False

    def _events(self, request: Request) -> Response:
        last = request.headers.get("Last-Event-ID")
        if last is None:
            last = request.query.get("after")
        if request.payloads:
            # Every event whole, the model's token deltas included: the page
            # is for signed-in users, who see everything a run wrote anyway.
            frames = sse_stream(
                self.engine,
                request.params["run_id"],
                last,
                shape=marked_event,
                timeout=self.live_timeout,
                viewer=request.user,
                source=request.source,
            )
        else:  # the shape, no view: see _masked_frame
            frames = sse_stream(
                self.engine,
                request.params["run_id"],
                last,
                shape=_masked_frame,
                timeout=self.live_timeout,
            )
        return Response(200, frames, dict(SSE_HEADERS), "text/event-stream")

    def _cancel(self, request: Request) -> Response:
        result = self.engine.cancel(
            request.params["run_id"], by=request.user, source=request.source
        )
        run = result.run
        if result.action is CancelAction.ENDED:
            message = f"The run is already {run.status.value}; nothing changed."
            return self.error(409, "Already ended", message, request)
        note = "cancel" if result.action is CancelAction.CANCELLED else "cancel_requested"
        return self._redirect(f"/runs/{run.id}", note)

    def _retry(self, request: Request) -> Response:
        engine = self.engine
        run = engine.get_run(request.params["run_id"])
        if run.status not in RETRYABLE:
            message = (
                f"The run is {run.status.value}; only a failed or cancelled run can be retried."
            )
            return self.error(409, "Not retried", message, request)
        run = engine.retry(run.id, by=request.user, source=request.source)
        return self._redirect(f"/runs/{run.id}", "retried")

    # -------------------------------------------------------- approvals

    # -------------------------------------------------------- schedules

    def _schedules(self, request: Request) -> Response:
        book = self.engine.schedules
        found = book.list()
        last = {s.name: book.firings(s.name, limit=1) for s in found}
        runs = self._runs_of([f for firings in last.values() for f in firings])
        body = schedules_body(found, last, runs, base=self.base)
        return self._html("Schedules", body, request)

    def _schedule(self, request: Request) -> Response:
        book = self.engine.schedules
        found = book.get(request.params["name"])
        if not request.payloads:
            found = masked_schedule(found)
        upcoming = [] if found.paused else book.next_firings(found.name, count=5)
        firings = book.firings(found.name, limit=_limit(request.query.get("limit")))
        body = schedule_body(found, upcoming, firings, self._runs_of(firings), base=self.base)
        return self._html(f"Schedule {found.name}", body, request)

    # ----------------------------------------------------------- threads

    def _threads(self, request: Request) -> Response:
        body = threads_body(self.engine.threads(), base=self.base)
        return self._html("Threads", body, request)

    def _read_thread(self, request: Request) -> tuple[Thread, list[dict[str, Any]]]:
        """The thread, and its messages as the user may see them (a read of
        payloads, in the audit log, when they may)."""
        view = self.engine.thread(request.params["thread"])
        if not request.payloads:
            return view, masked_messages(view.messages)
        if view.runs:
            latest = view.runs[-1].id
            self.engine.viewed_payloads(latest, by=request.user, source=request.source)
        return view, [dict(m) for m in view.messages]

    def _thread(self, request: Request) -> Response:
        view, messages = self._read_thread(request)
        shown = dataclasses.replace(view, messages=tuple(messages))
        body = thread_body(
            shown,
            base=self.base,
            csrf=request.csrf_token,
            field=CSRF_FIELD,
            send=request.decides,
            note=self._note(request),
        )
        return self._html(f"Thread {view.id}", body, request)

    def _send(self, request: Request) -> Response:
        thread = request.params["thread"]
        self._sent(thread, request)
        return self._redirect(f"/threads/{quote(thread, safe='')}", "sent")

    def _sent(self, thread: str, request: Request) -> Run:
        agent = request.form.get("agent") or ""
        if not agent:
            runs = self.engine.thread(thread).runs
            if not runs:
                raise InvalidInput("name the agent: the thread has no run yet")
            agent = runs[-1].agent
        return self.engine.send(
            thread,
            request.form.get("message", ""),
            agent=agent,
            by=request.user,
            id=request.form.get("id") or None,
            source=request.source,
        )

    def _api_thread(self, request: Request) -> Response:
        try:
            view, messages = self._read_thread(request)
        except RunwrightError as exc:
            return self._json_error(exc)
        return self._json(200, thread_json(view, messages))

    def _api_send(self, request: Request) -> Response:
        try:
            run = self._sent(request.params["thread"], request)
        except RunwrightError as exc:
            return self._json_error(exc)
        answer = {"run": run.id, "status": run.status.value, "thread": run.thread}
        return self._json(202, answer)

    # ------------------------------------------------------- evaluations

    def _evaluations(self, request: Request) -> Response:
        query = request.query
        chosen, against = _text(query, "evaluation"), _text(query, "against")
        if chosen or against:  # the list's form: on to the comparison
            if not (chosen and against):
                raise InvalidInput("pick two evaluations to compare: evaluation and against")
            return Response(303, "", {"Location": comparison_path(self.base, chosen, against)})
        body = evaluations_body(
            self._listed(query), base=self.base, dataset=_text(query, "dataset")
        )
        return self._html("Evaluations", body, request)

    def _listed(self, query: Mapping[str, str]) -> list[EvaluationInfo]:
        dataset = _text(query, "dataset") or None
        return self.engine.evaluations(dataset, limit=_limit(query.get("limit")))

    def _read_evaluation(self, evaluation_id: str, request: Request) -> Evaluation:
        """The evaluation with its cases, their reports masked for a person
        who may not see payloads."""
        found = self.engine.evaluation(evaluation_id)
        return found if request.payloads else masked_evaluation(found)

    def _case_payloads(self, info: EvaluationInfo, request: Request) -> Payloads:
        """The payloads of the cases ``info`` replayed, masked for a person
        who may not see them; None if the dataset's version was deleted."""
        try:
            cases = self.engine.dataset(info.dataset, info.dataset_version).cases
        except DatasetNotFound:
            return None
        found = {position: case_payload(case) for position, case in enumerate(cases)}
        return found if request.payloads else {p: mask(v) for p, v in found.items()}

    def _viewed_evaluation(self, request: Request, **detail: str) -> None:
        """The audit log's entry for a page that showed cases' payloads
        (an evaluation belongs to no run: its ids are the entry's detail)."""
        if request.payloads:
            self.engine.viewed_payloads(None, by=request.user, source=request.source, detail=detail)

    def _evaluation(self, request: Request) -> Response:
        evaluation = self._read_evaluation(request.params["evaluation_id"], request)
        payloads = self._case_payloads(evaluation.info, request)
        body = evaluation_body(evaluation, payloads, base=self.base)
        self._viewed_evaluation(request, evaluation=evaluation.info.id)
        return self._html(f"Evaluation {evaluation.info.id}", body, request)

    def _read_comparison(self, request: Request) -> tuple[Comparison, Payloads]:
        first = self._read_evaluation(request.params["evaluation_id"], request)
        second = self._read_evaluation(request.params["against"], request)
        comparison = compare(first, second)  # of one dataset version, or InvalidInput
        return comparison, self._case_payloads(first.info, request)

    def _comparison(self, request: Request) -> Response:
        comparison, payloads = self._read_comparison(request)
        body = comparison_body(comparison, payloads, base=self.base)
        first, second = comparison.first.info.id, comparison.second.info.id
        self._viewed_evaluation(request, evaluation=first, against=second)
        return self._html(f"Evaluation {first} against {second}", body, request)

    def _api_evaluations(self, request: Request) -> Response:
        try:
            found = self._listed(request.query)
        except RunwrightError as exc:
            return self._json_error(exc)
        return self._json(200, {"evaluations": [info_json(info) for info in found]})

    def _api_evaluation(self, request: Request) -> Response:
        try:
            evaluation = self._read_evaluation(request.params["evaluation_id"], request)
            payloads = self._case_payloads(evaluation.info, request)
        except RunwrightError as exc:
            return self._json_error(exc)
        self._viewed_evaluation(request, evaluation=evaluation.info.id)
        return self._json(200, evaluation_json(evaluation, payloads))

    def _api_comparison(self, request: Request) -> Response:
        try:
            comparison, payloads = self._read_comparison(request)
        except RunwrightError as exc:
            return self._json_error(exc)
        first, second = comparison.first.info.id, comparison.second.info.id
        self._viewed_evaluation(request, evaluation=first, against=second)
        return self._json(200, comparison_json(comparison, payloads))

    def _json(self, status: int, data: Any) -> Response:
        headers = {"X-Content-Type-Options": "nosniff", "Cache-Control": "no-store"}
        return Response(status, json.dumps(data), headers, "application/json")

    def _json_error(self, exc: RunwrightError) -> Response:
        status, title = http_errors.status_for(exc)
        return self._json(status, {"error": title, "message": exc.message})

    def _runs_of(self, firings: list[Firing]) -> dict[str, Run]:
        """The firings' runs that still exist (a pruned one is gone)."""
        runs: dict[str, Run] = {}
        for firing in firings:
            if firing.run_id is not None and firing.run_id not in runs:
                try:
                    runs[firing.run_id] = self.engine.get_run(firing.run_id)
                except RunNotFound:
                    continue
        return runs

    def _inbox(self, request: Request) -> Response:
        agent = _text(request.query, "agent") or None
        items = self.engine.inbox(limit=_limit(request.query.get("limit")), agent=agent)
        if not request.payloads:
            items = [masked_item(item) for item in items]
        body = inbox_body(
            items,
            base=self.base,
            csrf=request.csrf_token,
            now=self.now(),
            agent=agent,
            note=self._note(request),
            decide=request.decides,
            payloads=request.payloads,
        )
        if not request.payloads:
            return self._html("Approvals", body, request)
        # The inbox shows each pending call's arguments.
        for run_id in dict.fromkeys(item.run.id for item in items):
            self.engine.viewed_payloads(run_id, by=request.user, source=request.source)
        return self._html("Approvals", body, request)

    def _approval(self, request: Request) -> Response:
        approval_id = request.params["approval_id"]
        token = request.query.get("token")
        if token is None:
            if request.user is None:
                return self._forbidden(request)
            # A signed-in user decides in the inbox (a link's page would
            # record the decision as the link's, not as theirs).
            return Response(303, "", {"Location": f"{self.base}/approvals#a-{approval_id}"})
        approval = self._by_token(approval_id, token)
        link = Request("GET", csrf_token=request.csrf_token)  # a link page shows no console
        action = f"{self.base}/approvals/{approval.approval_id}"
        change = self.engine.tool_change(approval) if approval.pending else None
        body = link_body(
            approval,
            action=action,
            token=token,
            csrf=request.csrf_token,
            now=self.now(),
            change=change,
        )
        # The link's holder sees the call's arguments (or the question).
        self.engine.viewed_payloads(approval.run_id, by="link", source=request.source)
        return self._html(link_title(approval), body, link)

    def _by_token(self, approval_id: str, token: str) -> Approval:
        try:
            return self.engine.check_token(approval_id, token)
        except StoreUnavailable:
            raise
        except RunwrightError:
            # The same answer whether the id names nothing or the token is
            # wrong: a link tells its holder nothing about other approvals.
            raise http_errors.BadLink() from None

    def _decide(self, request: Request) -> Response:
        """Approve or deny an approval (with edited ``arguments``, or
        ``for_run``), or ``answer`` a question; by its link's ``token``, or
        as the signed-in user."""
        approval_id = request.params["approval_id"]
        form = request.form
        decision = _decision(form, answers=True)
        token = form.get("token")
        if token:
            # The token first: a forged link with an edit or an answer gets
            # the answer any forged link gets, whatever else it carries.
            approval = self._by_token(approval_id, token)
            link = Request("POST")
            if not approval.pending:
                return self._already(approval, link)
            try:
                _run, note = self._record(
                    approval_id,
                    approval,
                    decision,
                    form,
                    by="link",
                    token=token,
                    source=request.source,
                )
            except ApprovalAlreadyDecided:
                return self._already(self._by_token(approval_id, token), link)
            except InvalidApprovalInput as exc:
                return self._not_decided(exc, link)
            return self.error(200, _LINK_DONE[note], _link_thanks(note, approval), link)
        if request.user is None:
            return self._forbidden(request)
        if not request.decides:
            return self._not_allowed(Ability.DECIDE, request)
        asked = self._asked(approval_id, decision, form)
        if asked is not None and not asked.pending:
            return self._already(asked, request)
        try:
            run, note = self._record(
                approval_id, asked, decision, form, by=request.user, source=request.source
            )
        except ApprovalAlreadyDecided as exc:
            return self.error(409, "Already decided", exc.message + "; nothing changed.", request)
        except InvalidApprovalInput as exc:
            return self._not_decided(exc, request)
        target = "/approvals" if form.get("next") == "inbox" else f"/runs/{run.id}"
        return self._redirect(target, note)

    def _asked(self, approval_id: str, decision: str, form: Mapping[str, str]) -> Approval | None:
        """The request a signed-in user's form decides, when the console needs
        it: to read an answer by its schema, or to tell an edit from the
        model's own arguments. The console's forms name its run (``run``)."""
        run_id = form.get("run")
        if run_id is None:
            if decision == "answer" or "arguments" in form:
                raise InvalidInput("a form that edits or answers names its run (the field run)")
            return None  # a plain approve or deny: the engine needs no more
        found = [a for a in self.engine.approvals(run_id) if a.approval_id == approval_id]
        if not found:
            raise http_errors.NoSuchApproval(f"run {run_id} has no approval {approval_id}")
        return found[0]

    def _record(
        self,
        approval_id: str,
        approval: Approval | None,
        decision: str,
        form: Mapping[str, str],
        *,
        by: str,
        token: str | None = None,
        source: str | None = None,
    ) -> tuple[Run, str]:
        """Hand the decision to the engine (``approval``: the request, when the
        console read it); the run, and the note that says what was done."""
        engine = self.engine
        trusted = token is None
        if decision == "answer":
            # A request that is no question gets the engine's own refusal
            # (WrongRequestKind), so the form is not read by a schema of a tool.
            if approval is not None and approval.kind is RequestKind.INPUT:
                value = answer_form.read(answer_form.plan(approval.schema), form)
            else:
                value = form.get(answer_form.ANSWER)
            run = engine.answer(
                approval_id, value, token=token, trusted=trusted, by=by, source=source
            )
            return run, "answered"
        if decision == "fail":
            run = engine.decide(
                approval_id,
                False,
                _reason(form),
                token=token,
                trusted=trusted,
                by=by,
                fail_run=True,
                source=source,
            )
            return run, "run_failed"
        approve = decision == "approve"
        arguments = _arguments(form, approval)
        for_run = _for_run(form)
        run = engine.decide(
            approval_id,
            approve,
            _reason(form),
            token=token,
            trusted=trusted,
            by=by,
            arguments=arguments,
            for_run=for_run,
            source=source,
        )
        if not approve:
            return run, "denied"
        return run, "for_run" if for_run else "edited" if arguments is not None else "approved"

    def _already(self, approval: Approval, request: Request) -> Response:
        noun = "question" if approval.kind is RequestKind.INPUT else "approval"
        message = f"This {noun} was already {decided_text(approval)}; nothing changed."
        return self.error(409, "Already decided", message, request)

    def _not_decided(self, exc: InvalidApprovalInput, request: Request) -> Response:
        said = exc.message.rstrip(".")
        message = f"{said}. Nothing was decided: go back, correct it and send it again."
        return self.error(400, "Not decided", message, request)

    def _decide_step(self, request: Request) -> Response:
        run_id = request.params["run_id"]
        step = _step_index(request.params["step"])
        approve = _decision(request.form) == "approve"
        reason = _reason(request.form)
        engine = self.engine
        # Questions are answered one by one, never with the step's approvals.
        of_step = [
            a
            for a in engine.approvals(run_id)
            if a.step_index == step and a.kind is RequestKind.APPROVAL
        ]
        if not of_step:
            raise http_errors.NoSuchStep(f"run {run_id} asked for no approval at step {step}")
        if approve:
            # A call whose tool changed since it was requested is decided on
            # its own, where its change is shown; approving the step's calls
            # together would leave them half decided.
            changed = [a.tool_name for a in of_step if a.pending and engine.tool_change(a)]
            if changed:
                exc = InvalidApprovalInput(
                    f"the tool of {', '.join(changed)} changed since its call was requested: "
                    "decide that call on its own"
                )
                return self._not_decided(exc, request)
        decided = 0
        for approval in of_step:
            if not approval.pending:
                continue
            try:
                engine.decide(
                    approval.approval_id,
                    approve,
                    reason,
                    trusted=True,
                    by=request.user,
                    source=request.source,
                )
            except ApprovalAlreadyDecided:
                continue  # decided meanwhile (a double click): once is enough
            decided += 1
        if decided == 0:
            message = f"Every approval of step {step} was already decided; nothing changed."
            return self.error(409, "Already decided", message, request)
        return self._redirect("/approvals", "approved" if approve else "denied")

    def _resolve_effect(self, request: Request) -> Response:
        run_id = request.params["run_id"]
        outcome = request.form.get("outcome", "")
        note = request.form.get("note", "").strip() or None
        self.engine.resolve_effect(
            run_id,
            request.params["call_id"],
            outcome,
            note=note,
            by=request.user,
            source=request.source,
        )
        return self._redirect(f"/runs/{run_id}", "resolved")


def _masked_frame(event: RunEvent) -> dict[str, Any] | None:
    """An event for a reader who may not see payloads: its shape, masked;
    token deltas left out (they are the model's text, and nothing else)."""
    if event.type is EventType.TOKEN:
        return None
    return marked_event(masked_event(event))


# ------------------------------------------------------------ input


def _text(query: Mapping[str, str], key: str) -> str:
    value = query.get(key, "").strip()
    if len(value) > MAX_QUERY_CHARS:
        raise InvalidInput(f"{key} is longer than {MAX_QUERY_CHARS} characters")
    return value


def _limit(raw: str | None) -> int:
    if raw is None or raw == "":
        return 50
    if not raw.isascii() or not raw.isdigit() or not 1 <= int(raw) <= MAX_PAGE:
        raise InvalidInput(f"limit must be a whole number from 1 to {MAX_PAGE}")
    return int(raw)


def _moment(raw: str | None, name: str) -> datetime | None:
    """A time from a filter (``2026-01-31T09:30``, as a datetime-local input
    sends it, or any ISO 8601 time); one without a zone is UTC."""
    if not raw:
        return None
    try:
        moment = datetime.fromisoformat(raw)
    except ValueError:
        raise InvalidInput(f"{name} must be a time like 2026-01-31T09:30") from None
    return moment if moment.tzinfo is not None else moment.replace(tzinfo=UTC)


def _decision(form: Mapping[str, str], *, answers: bool = False) -> str:
    """``approve`` or ``deny`` (or, where one request is decided, ``fail``:
    deny and fail the run, or ``answer`` a question)."""
    decision = form.get("decision", "")
    if decision in ("approve", "deny") or (answers and decision in ("answer", "fail")):
        return decision
    raise InvalidInput("decision must be approve, deny" + (", fail or answer" if answers else ""))


def _arguments(form: Mapping[str, str], approval: Approval | None) -> dict[str, Any] | None:
    """The edited arguments a form carries, or None: no box, or the model's
    own arguments sent back as they were (every decision sends the box)."""
    raw = form.get("arguments")
    if raw is None:
        return None
    edited = parse_json(raw, "the edited arguments")
    if not isinstance(edited, dict):
        raise InvalidApprovalInput("refused the edited arguments: they must be a JSON object")
    if approval is not None and _same_json(edited, approval.input):
        return None
    return edited


def _same_json(a: object, b: object) -> bool:
    # As JSON text, where 1, 1.0 and true differ (Python's == holds them equal).
    return json.dumps(a, sort_keys=True) == json.dumps(b, sort_keys=True)


def _for_run(form: Mapping[str, str]) -> bool:
    raw = form.get("for_run", "")
    if raw not in ("", "1", "on"):
        raise InvalidApprovalInput("for_run is 1 (a ticked box) or left out")
    return raw != ""


def _reason(form: Mapping[str, str]) -> str | None:
    return form.get("reason", "").strip() or None


_LINK_DONE = {
    "approved": "Approved",
    "edited": "Approved",
    "for_run": "Approved",
    "denied": "Denied",
    "run_failed": "Denied",
    "answered": "Answered",
}


def _link_thanks(note: str, approval: Approval) -> str:
    """What a link's holder reads once they decided."""
    if note == "answered":
        return "Answered. Thank you."
    said = f"{_LINK_DONE[note]}: {approval.tool_name}"
    if note == "edited":
        said += ", with your arguments"
    elif note == "for_run":
        said += ", for the rest of the run"
    elif note == "run_failed":
        said += ", and the run failed"
    return said + ". Thank you."


def _step_index(raw: str) -> int:
    if not raw.isascii() or not raw.isdigit() or len(raw) > 9:
        raise InvalidInput("a step is a whole number")
    return int(raw)


__all__ = ["CSRF_FIELD", "ROUTES", "Console", "Request", "Response", "Route"]
