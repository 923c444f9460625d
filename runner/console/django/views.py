"""The console's routes as Django views: the project's sign-in and
permissions decide who gets through, Django's CSRF token guards the forms,
and :class:`~runner.console.views.Console` does the rest.

Settings (all optional):

- ``RUNWRIGHT_CONSOLE_ENGINE``: the dotted path of a function that returns
  the :class:`~runner.Engine` (default ``"runner.default_engine"``), called
  on each request;
- ``RUNWRIGHT_CONSOLE_LIVE_TIMEOUT``: seconds a run page's live stream stays
  open before the browser reconnects (default 600).

Who sees payloads and who decides (runner/console/abilities.py) are two
permissions of the app beside the per-route ones: ``view_payloads`` (without
it, the pages and the event stream show payloads masked) and ``decide_runs``
(without it, no form is shown and every decision's POST is refused, whatever
per-route permission the user has). A superuser has both.

Serve the project from WSGI with threads (``gunicorn -k gthread``): a run
page's live stream holds one while it is open.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any

from django.conf import settings
from django.contrib.auth.views import redirect_to_login
from django.db import transaction
from django.http import HttpRequest, HttpResponse, StreamingHttpResponse
from django.middleware.csrf import CsrfViewMiddleware, get_token
from django.urls import URLPattern, path, reverse
from django.utils.module_loading import import_string
from django.views.decorators.csrf import csrf_exempt

from runner.console import http_errors
from runner.console.abilities import Ability
from runner.console.django.db import APP_LABEL, ConsoleNotConfigured
from runner.console.forms import FormRefused, check_length, parse_form
from runner.console.views import CSRF_FIELD, LIVE_TIMEOUT_SECONDS, ROUTES, Console, Request, Route
from runner.console.views import Response as ConsoleResponse

if TYPE_CHECKING:
    from runner.core.engine.engine import Engine

ENGINE_SETTING = "RUNWRIGHT_CONSOLE_ENGINE"
DEFAULT_ENGINE = "runner.default_engine"
LIVE_TIMEOUT_SETTING = "RUNWRIGHT_CONSOLE_LIVE_TIMEOUT"

# The permission each route wants of a signed-in user (app label
# runwright_console). Every route must be here: urlpatterns() fails without.
PERMISSIONS = {
    "runs": "view_run",
    "run": "view_run",
    "events": "view_run",
    "cancel": "cancel_run",
    "retry": "retry_run",
    "decide_step": "decide_approval",
    "resolve_effect": "resolve_effect",
    "inbox": "view_approval",
    "approval": "view_approval",  # without a token: on to the inbox
    "decide": "decide_approval",
    "schedules": "view_run",
    "schedule": "view_run",
    "threads": "view_run",
    "thread": "view_run",
    "send": "view_run",  # with decide_runs (Ability.DECIDE), as every action
    "api_thread": "view_run",
    "api_send": "view_run",
    # An evaluation's pages show replays of runs: whoever may see runs.
    "evaluations": "view_run",
    "evaluation": "view_run",
    "comparison": "view_run",
    "api_evaluations": "view_run",
    "api_evaluation": "view_run",
    "api_comparison": "view_run",
}
_MAY = {
    "view_run": "see runs",
    "view_approval": "see approvals",
    "decide_approval": "decide approvals",
    "cancel_run": "cancel runs",
    "retry_run": "retry runs",
    "resolve_effect": "record what an effect of unknown outcome did",
}
# The permission that gives each ability (app label runwright_console).
ABILITY_PERMISSIONS = {
    Ability.SEE_RUNS: "view_run",
    Ability.SEE_PAYLOADS: "view_payloads",
    Ability.DECIDE: "decide_runs",
}
STAFF_ONLY = "The console is for staff: your account may not use it."
# Django checks a POST's Origin, and a browser sends "Origin: null" from a
# page with no-referrer. strict-origin still never sends a path (an approval
# link's token is in its URL), only the site.
REFERRER_POLICY = "strict-origin"


def engine_factory() -> Callable[[], Engine]:
    """The function ``RUNWRIGHT_CONSOLE_ENGINE`` names."""
    factory: Callable[[], Engine] = import_string(getattr(settings, ENGINE_SETTING, DEFAULT_ENGINE))
    return factory


def urlpatterns() -> list[URLPattern]:
    """One pattern per route, named as the route. Routes that share a path
    (an approval's page and its form) share one view, which picks the route
    by method; the first pattern of a path is the one that resolves."""
    by_rule: dict[str, dict[str, Route]] = {}
    for route in ROUTES:
        if route.name not in PERMISSIONS:
            raise ConsoleNotConfigured(f"the console route {route.name!r} has no permission")
        by_rule.setdefault(route.rule, {})[route.method] = route
    views = {rule: _view(routes) for rule, routes in by_rule.items()}
    return [path(r.rule.lstrip("/"), views[r.rule], name=r.name) for r in ROUTES]


def _view(routes: Mapping[str, Route]) -> Callable[..., Any]:
    def view(request: HttpRequest, **params: str) -> Any:
        # Django's CSRF middleware, run by the view: its token (get_token), its
        # cookie or session, its CSRF_* settings and trusted origins.
        csrf = CsrfViewMiddleware(_no_response)
        csrf.process_request(request)
        response = _answer(request, routes, params, csrf)
        return csrf.process_response(request, response)  # sets the cookie

    view.__name__ = "console_" + "_".join(route.name for route in routes.values())
    # No console view writes Django's database; the stream must not hold a
    # transaction open (ATOMIC_REQUESTS) while it waits for a run's events.
    for alias in settings.DATABASES:
        view = transaction.non_atomic_requests(using=alias)(view)
    # The view checks CSRF itself (_csrf_ok), whether or not the project has
    # CsrfViewMiddleware, and answers a refusal with the console's own page.
    exempt: Callable[..., Any] = csrf_exempt(view)
    return exempt


def _answer(
    request: HttpRequest, routes: Mapping[str, Route], params: dict[str, str], csrf: Any
) -> Any:
    console = _console(request)
    method = request.method or "GET"
    route = routes.get("GET" if method == "HEAD" else method)
    if route is None:
        allowed = ", ".join(routes)
        answer = console.error(405, "Method not allowed", f"Use {allowed}.", Request(method))
        answer.headers["Allow"] = allowed
        return _to_django(answer)
    form: dict[str, str] = {}
    if method == "POST":
        try:
            form = _form(request)
        except FormRefused as refused:
            return _to_django(
                console.error(refused.status, "Bad request", str(refused), Request(method))
            )
    user: str | None = None
    abilities: frozenset[Ability] = frozenset()
    if not _by_link(route, request, form):
        refused_answer = _refusal(request, route, console)
        if refused_answer is not None:
            return refused_answer
        user = request.user.get_username()
        abilities = abilities_of(request.user)
    last = request.headers.get("Last-Event-ID")
    headers = {} if last is None else {"Last-Event-ID": last}
    answer = console.handle(
        route.name,
        Request(
            method=method,
            params=params,
            query={key: request.GET.getlist(key)[0] for key in request.GET},
            form=form,
            user=user,
            csrf_ok=method == "POST" and _csrf_ok(request, form, csrf),
            csrf_token=_token(request),
            headers=headers,
            remote=request.META.get("REMOTE_ADDR"),
            abilities=abilities,
        ),
    )
    return _to_django(answer)


def abilities_of(user: Any) -> frozenset[Ability]:
    """What a signed-in Django user may do in the console, by their permissions."""
    return frozenset(
        ability
        for ability, permission in ABILITY_PERMISSIONS.items()
        if user.has_perm(f"{APP_LABEL}.{permission}")
    )


def _console(request: HttpRequest) -> Console:
    match = request.resolver_match
    namespace = match.namespace if match is not None and match.namespace else APP_LABEL
    timeout = float(getattr(settings, LIVE_TIMEOUT_SETTING, LIVE_TIMEOUT_SECONDS))
    base = reverse(f"{namespace}:runs").rstrip("/")
    return Console(engine_factory(), base_url=base, live_timeout=timeout)


def _by_link(route: Route, request: HttpRequest, form: Mapping[str, str]) -> bool:
    """An approval link's request: its token, not a user, opens it (the
    console then checks the token, and records a decision as the link's)."""
    if not route.public:
        return False
    return "token" in request.GET if route.method == "GET" else bool(form.get("token"))


def _refusal(request: HttpRequest, route: Route, console: Console) -> Any:
    """The answer to a user who may not use ``route``, or None."""
    user = getattr(request, "user", None)
    if user is None:
        raise ConsoleNotConfigured(
            "the Runwright console needs django.contrib.auth's AuthenticationMiddleware"
        )
    method = request.method or "GET"
    if not user.is_authenticated:
        if method in ("GET", "HEAD"):
            return redirect_to_login(request.get_full_path())
        # A form sent after the session ended: nothing to come back to.
        return _to_django(
            console.error(403, "Forbidden", http_errors.FORBIDDEN_MESSAGE, Request(method))
        )
    if not (user.is_active and user.is_staff):
        return _to_django(console.error(403, "Forbidden", STAFF_ONLY, Request(method)))
    permission = PERMISSIONS[route.name]
    if not user.has_perm(f"{APP_LABEL}.{permission}"):
        message = f"You may not {_MAY[permission]}: that takes the {permission} permission."
        signed_in = Request(method, user=user.get_username())
        return _to_django(console.error(403, "Forbidden", message, signed_in))
    return None


def _form(request: HttpRequest) -> dict[str, str]:
    raw = request.META.get("CONTENT_LENGTH")
    length = int(raw) if raw and raw.isascii() and raw.isdigit() else None
    if not check_length(request.META.get("CONTENT_TYPE"), length):
        return {}
    return parse_form(request.body)


def _csrf_ok(request: HttpRequest, form: Mapping[str, str], csrf: Any) -> bool:
    """Whether the POST passes Django's CSRF check (with its Origin and
    Referer checks), the console's form carrying the token in its own field."""
    sent = form.get(CSRF_FIELD)
    if sent:
        # Django reads a token from its own field (csrfmiddlewaretoken), else
        # from this header; the console's forms name theirs csrf_token.
        request.META[settings.CSRF_HEADER_NAME] = sent
    return csrf.process_view(request, _checked, (), {}) is None


def _checked(request: HttpRequest) -> None:
    """Stands for the view in the CSRF check: not exempt."""


def _no_response(request: HttpRequest) -> None:
    return None


def _token(request: HttpRequest) -> str:
    return str(get_token(request))


def _to_django(answer: ConsoleResponse) -> Any:
    body = answer.body
    kind = HttpResponse if isinstance(body, str) else StreamingHttpResponse
    response = kind(body, status=answer.status, content_type=answer.content_type)
    for name, value in answer.headers.items():
        response[name] = value
    if "Referrer-Policy" in response:
        response["Referrer-Policy"] = REFERRER_POLICY
    return response
