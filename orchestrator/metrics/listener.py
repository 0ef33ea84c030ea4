"""The listener of ``metrics.listen``: the registry's series in Prometheus's formats,
to anyone who reaches the address (no token: keep it on loopback, or on a network only
Prometheus reaches, with ``metrics.allow_remote``).

It is prometheus_client's WSGI application (the format the scraper asks for in its
Accept header, gzip when asked) on a threading server that cannot be starved: a request
must arrive within LISTENER_TIMEOUT_SECONDS, and at most LISTENER_MAX_CONNECTIONS are
served at once (more are closed at once).
"""

from __future__ import annotations

import contextlib
import socket
import threading
from typing import Any
from wsgiref.simple_server import WSGIRequestHandler

from prometheus_client import CollectorRegistry, make_wsgi_app
from prometheus_client.exposition import ThreadingWSGIServer

from orchestrator.errors import OrchestratorError

LISTENER_TIMEOUT_SECONDS = 10.0
LISTENER_MAX_CONNECTIONS = 16


class _Handler(WSGIRequestHandler):
    timeout = LISTENER_TIMEOUT_SECONDS  # a slow client gives up its thread

    def log_message(self, format: str, *args: Any) -> None:
        """No line per scrape."""


class _Server(ThreadingWSGIServer):
    def __init__(self, address: tuple[str, int], family: socket.AddressFamily) -> None:
        self.address_family = family
        self.slots = threading.BoundedSemaphore(LISTENER_MAX_CONNECTIONS)
        super().__init__(address, _Handler)

    def process_request(self, request: Any, client_address: Any) -> None:
        if not self.slots.acquire(blocking=False):
            self.shutdown_request(request)
            return
        try:
            super().process_request(request, client_address)
        except BaseException:  # no thread took it
            self.slots.release()
            raise

    def process_request_thread(self, request: Any, client_address: Any) -> None:
        try:
            super().process_request_thread(request, client_address)
        finally:
            self.slots.release()


class Listener:
    """Serves ``registry`` on ``listen`` (HOST:PORT) from a thread of its own until
    ``close``; OrchestratorError naming the address when it cannot listen there."""

    def __init__(self, registry: CollectorRegistry, listen: str) -> None:
        host, _, port = listen.rpartition(":")
        host = host.strip("[]")
        family = socket.AF_INET6 if ":" in host else socket.AF_INET
        try:
            self.server = _Server((host, int(port)), family)
        except OSError as exc:
            raise OrchestratorError(
                f"metrics.listen {listen}: cannot listen there ({exc.strerror or exc})",
                hint="choose a free address in orchestrator.yaml, or remove metrics.listen",
            ) from None
        self.server.set_app(make_wsgi_app(registry))
        self.listen = listen
        self.thread = threading.Thread(
            target=self.server.serve_forever, name="metrics-listener", daemon=True
        )
        self.thread.start()

    def close(self, timeout: float = 5.0) -> None:
        self.server.shutdown()
        with contextlib.suppress(OSError):
            self.server.server_close()
        self.thread.join(timeout)
