"""A tiny web app that starts and approves runs, traced the way an
instrumented app would be: a server span around each request, current while
the view runs (done by hand here: the Flask instrumentation is not a
dependency)."""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any

from flask import Flask, request
from opentelemetry import trace
from opentelemetry.trace import SpanKind

from runner import Engine


def create_app(engine: Engine, tracer: trace.Tracer) -> Flask:
    app = Flask(__name__)

    def traced(route: str) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
        def wrap(view: Callable[..., Any]) -> Callable[..., Any]:
            @functools.wraps(view)
            def inner(**kwargs: Any) -> Any:
                with tracer.start_as_current_span(
                    f"{request.method} {route}",
                    kind=SpanKind.SERVER,
                    attributes={
                        "http.request.method": request.method,
                        "http.route": route,
                        "url.path": request.path,
                    },
                ) as span:
                    response = app.make_response(view(**kwargs))
                    span.set_attribute("http.response.status_code", response.status_code)
                    return response

            return inner

        return wrap

    @app.post("/runs/<agent>")
    @traced("/runs/<agent>")
    def start(agent: str) -> Any:
        run = engine.start(agent, request.get_json())
        return {"run_id": run.id}, 201

    @app.post("/approvals/<approval_id>")
    @traced("/approvals/<approval_id>")
    def decide(approval_id: str) -> Any:
        body = request.get_json()
        run = engine.decide(
            approval_id, bool(body["approve"]), body.get("reason"), token=body["token"]
        )
        return {"status": run.status.value}

    return app
