"""A TCP proxy that a test can cut: an outage of the server behind it, as its
clients see it, without touching the server (which may be the machine's).

``cut()`` closes every proxied connection and stops listening, so clients get
their connections reset and new ones refused, as when the server is down;
``restore()`` listens on the same port again. One thread serves every
connection (``selectors``), so a proxy costs its process one thread.

``from_client``, if given, sees every chunk a client sends, on the proxy's
thread (a test counts the Postgres messages behind a step with it).
"""

from __future__ import annotations

import contextlib
import selectors
import socket
import struct
import threading
from collections.abc import Callable
from typing import Any

from store.local import free_port

_CHUNK = 65536


class TcpProxy:
    """Forwards 127.0.0.1:``port`` to ``target_host``:``target_port``."""

    def __init__(
        self,
        target_host: str,
        target_port: int,
        port: int | None = None,
        from_client: Callable[[socket.socket, bytes], None] | None = None,
    ) -> None:
        self.target = (target_host, target_port)
        self._from_client = from_client
        self._clients: set[socket.socket] = set()
        self.port = port or free_port()
        self._selector = selectors.DefaultSelector()
        self._peers: dict[socket.socket, socket.socket] = {}
        self._listener: socket.socket | None = None
        self._wake_r, self._wake_w = socket.socketpair()
        self._commands: list[tuple[str, threading.Event]] = []
        self._lock = threading.Lock()
        self._thread = threading.Thread(target=self._serve, name="tcp-proxy", daemon=True)
        self._stopped = False

    def start(self) -> TcpProxy:
        # Registered before the thread runs; from then on only it uses the selector.
        self._listen()
        self._selector.register(self._wake_r, selectors.EVENT_READ, "wake")
        self._thread.start()
        return self

    @property
    def cut_off(self) -> bool:
        return self._listener is None

    def cut(self) -> None:
        """Reset every connection and refuse new ones until :meth:`restore`."""
        self._command("cut")

    def restore(self) -> None:
        """Accept connections again, on the same port."""
        self._command("restore")

    def close(self) -> None:
        if self._thread.is_alive():
            self._command("stop")
            self._thread.join(10)
        self._wake_r.close()
        self._wake_w.close()
        self._selector.close()

    def _command(self, name: str) -> None:
        done = threading.Event()
        with self._lock:
            self._commands.append((name, done))
        self._wake_w.send(b"x")
        if not done.wait(10):
            raise RuntimeError(f"the proxy did not {name} within 10 s")

    def _listen(self) -> None:
        listener = socket.socket()
        listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        listener.bind(("127.0.0.1", self.port))
        listener.listen(128)
        listener.setblocking(False)
        self._listener = listener
        self._selector.register(listener, selectors.EVENT_READ, "accept")

    def _serve(self) -> None:
        while not self._stopped:
            for key, _ in self._selector.select(timeout=1.0):
                sock: Any = key.fileobj
                if key.data == "wake":
                    self._run_commands()
                elif key.data == "accept":
                    self._accept()
                elif sock in self._peers:
                    self._forward(sock)
        self._drop_all()
        self._stop_listening()

    def _run_commands(self) -> None:
        with contextlib.suppress(BlockingIOError):
            self._wake_r.recv(1024)
        with self._lock:
            commands, self._commands = self._commands, []
        for name, done in commands:
            if name == "cut":
                self._stop_listening()
                self._drop_all()
            elif name == "restore" and self._listener is None:
                self._listen()
            elif name == "stop":
                self._stopped = True
            done.set()

    def _accept(self) -> None:
        assert self._listener is not None
        try:
            client, _ = self._listener.accept()
        except BlockingIOError:
            return
        try:
            upstream = socket.create_connection(self.target, timeout=5)
        except OSError:
            _reset(client)
            return
        for sock in (client, upstream):
            sock.setblocking(True)
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self._clients.add(client)
        self._peers[client] = upstream
        self._peers[upstream] = client
        self._selector.register(client, selectors.EVENT_READ, "data")
        self._selector.register(upstream, selectors.EVENT_READ, "data")

    def _forward(self, sock: socket.socket) -> None:
        peer = self._peers[sock]
        try:
            data = sock.recv(_CHUNK)
            if data:
                if self._from_client is not None and sock in self._clients:
                    self._from_client(sock, data)
                peer.sendall(data)
                return
        except OSError:
            pass
        self._drop(sock)

    def _drop(self, sock: socket.socket) -> None:
        peer = self._peers.pop(sock, None)
        for one in (sock, peer):
            if one is None:
                continue
            self._peers.pop(one, None)
            self._clients.discard(one)
            with contextlib.suppress(KeyError, ValueError):
                self._selector.unregister(one)
            _reset(one)

    def _drop_all(self) -> None:
        for sock in list(self._peers):
            self._drop(sock)

    def _stop_listening(self) -> None:
        if self._listener is None:
            return
        with contextlib.suppress(KeyError, ValueError):
            self._selector.unregister(self._listener)
        self._listener.close()
        self._listener = None


def _reset(sock: socket.socket) -> None:
    """Close with a reset, as a server that went away does to its clients."""
    with contextlib.suppress(OSError):
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
    sock.close()
