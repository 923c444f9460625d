"""A small threaded HTTP server for the standalone console, from the
standard library (``wsgiref``): one thread a connection, each an open event
stream holds while it is open, all of them daemons so that a stream never
keeps the process from stopping.

It speaks plain HTTP/1.0 (a connection a request; a stream ends with its
connection) and is meant to listen on loopback, or behind a TLS proxy.
"""

from __future__ import annotations

import logging
import signal
import socket
import socketserver
import threading
from collections.abc import Callable
from types import FrameType
from typing import Any
from wsgiref.simple_server import WSGIRequestHandler, WSGIServer

log = logging.getLogger(__name__)

# Seconds a client may take to send its request, and to take each write
# (a stream writes at least every 15 s: a keep-alive).
SOCKET_TIMEOUT = 60.0

WSGIApp = Callable[[dict[str, Any], Callable[..., Any]], Any]


class _Handler(WSGIRequestHandler):
    server: ConsoleServer

    def setup(self) -> None:
        super().setup()
        self.connection.settimeout(self.server.socket_timeout)

    def log_request(self, code: int | str = "-", size: int | str = "-") -> None:
        # Never the query: an approval link's token is in it.
        path = getattr(self, "path", "").split("?", 1)[0][:200]
        log.info("%s %s %s %s", self.client_address[0], self.command, path, code)

    def log_message(self, format: str, *args: Any) -> None:
        log.warning("%s %s", self.client_address[0], (format % args)[:200])


class ConsoleServer(socketserver.ThreadingMixIn, WSGIServer):
    """``wsgiref``'s server with a thread for each connection."""

    daemon_threads = True
    socket_timeout = SOCKET_TIMEOUT
    # socketserver's default backlog is 5: a burst of a few more connections
    # than the accept loop takes at once had the rest wait 1 s or more for
    # the kernel to retry their SYN.
    request_queue_size = 128
    # Do not wait for open streams on close: they end with the process.
    block_on_close = False

    def server_bind(self) -> None:
        # HTTPServer.server_bind asks the resolver for the host's full name
        # (socket.getfqdn), which can hang on a machine without DNS.
        socketserver.TCPServer.server_bind(self)
        host, port = self.server_address[:2]
        self.server_name = str(host)
        self.server_port = int(port)
        self.setup_environ()


class _ConsoleServer6(ConsoleServer):
    address_family = socket.AF_INET6


def make_server(
    app: WSGIApp, host: str, port: int, *, timeout: float = SOCKET_TIMEOUT
) -> ConsoleServer:
    """A server for ``app`` bound to ``host``:``port`` (0: a free port; the
    bound one is ``server.server_port``). ``timeout``: seconds a client may
    take to send its request, and to take each write. Raises OSError if it
    cannot bind."""
    kind = _ConsoleServer6 if ":" in host else ConsoleServer
    server = kind((host, port), _Handler)
    server.socket_timeout = timeout
    server.set_app(app)
    return server


def serve(
    app: WSGIApp,
    host: str,
    port: int,
    *,
    ready: Callable[[str, int], None] | None = None,
) -> None:
    """Serve ``app`` on ``host``:``port`` until SIGINT or SIGTERM (or
    :meth:`ConsoleServer.shutdown`), then stop at once: no new connection is
    taken, and open streams end with the process. ``ready(host, port)`` is
    called once the socket listens (with the bound port when ``port`` is 0)."""
    server = make_server(app, host, port)
    serve_on(server, ready=ready)


def serve_on(server: ConsoleServer, *, ready: Callable[[str, int], None] | None = None) -> None:
    """:func:`serve`, on a server already made."""
    stopping = threading.Event()

    def stop(signum: int, frame: FrameType | None) -> None:
        if not stopping.is_set():
            stopping.set()
            log.info("stopping the console (%s)", signal.Signals(signum).name)
            # shutdown() waits for serve_forever to return: not from the
            # thread that runs it, which this handler interrupts.
            threading.Thread(target=server.shutdown, daemon=True).start()

    previous: dict[signal.Signals, Any] = {}
    if threading.current_thread() is threading.main_thread():
        for signum in (signal.SIGINT, signal.SIGTERM):
            previous[signum] = signal.signal(signum, stop)
    try:
        if ready is not None:
            ready(server.server_name, server.server_port)
        server.serve_forever(poll_interval=0.2)
    finally:
        for signum, handler in previous.items():
            signal.signal(signum, handler)
        server.server_close()


__all__ = ["ConsoleServer", "make_server", "serve", "serve_on"]
